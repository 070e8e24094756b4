"""peon.approval.secret_paths: the secret-like path heuristic — the shipped list, its format and matching (pure)."""

from __future__ import annotations

import pytest

from peon.core.errors import ConfigError
from peon.core.paths import parse_file_path
from peon.approval.secret_paths import backup_variants, classify_secret, parse_secret_patterns, shipped_secret_patterns

# -- the secret-like heuristic ----------------------------------------------------------------------------

SECRET = [
    ".env", ".env.local", ".env.production", "app/.env", ".ENV", "deploy/.Env.Staging", ".envrc",
    ".ssh/config", "home/.ssh/known_hosts", ".SSH/authorized_keys",
    "id_rsa", "keys/id_ed25519", "id_ecdsa", "id_dsa", "id_ecdsa_sk", "id_github",
    "server.pem", "tls/site.KEY", "cert.p12", "cert.pfx", "store.jks", "release.keystore", "id_rsa.pem",
    ".aws/credentials", "home/.aws/credentials", ".kube/config", "kubeconfig", "ci/KUBECONFIG",
    ".docker/config.json", ".netrc", ".npmrc", ".pypirc", ".git-credentials", ".pgpass", ".htpasswd",
    "credentials", "credentials.json", "gcp/Credentials.yaml", "secrets/db.txt", "k8s/secrets/token",
    "prod.tfvars", "prod.tfvars.json", "terraform.tfstate", "infra/terraform.tfstate.backup", ".vault-token",
    ".bash_history", ".zsh_history", ".psql_history", ".mysql_history", ".sqlite_history",
    ".python_history", ".local/share/fish/fish_history", ".histfile", ".history", ".dbshell",
    # backup copies
    ".env.bak", ".env.old", ".env~", "id_rsa.bak", "server.pem~", ".env.bak~", ".netrc.OLD",
    "terraform.tfstate.bak", ".ssh.bak/id", "secrets~/x",
]

# Credential files the survey in docs/files.md adds, by family.
MORE_SECRET = [
    # database clients
    ".my.cnf", "home/.MY.CNF", ".mylogin.cnf", ".pgpass", ".pg_service.conf",
    # S3, Docker, Kubernetes
    ".s3cfg", ".dockercfg", "home/.docker/config.json", "clusters/prod.kubeconfig", "kubeconfig.yaml",
    # cloud credentials and service-account keys
    ".aws/config", ".aws/sso/cache/token.json", ".azure/msal_token_cache.json", "deploy/prod.publishsettings",
    ".config/gcloud/access_tokens.db", "application_default_credentials.json", "keys/deploy-sa.json",
    "gcp-service-account.json", "ci/my_service_account_key.json", "my-project-1a2b3c4d5e6f.json", ".boto",
    "doctl/config.yaml", "adc.json",
    # code hosts, registries, git
    ".config/gh/hosts.yml", ".config/hub", ".gitconfig", "repo/.git/config", ".git-credentials", "_netrc",
    # password managers and wallets
    "vault.kdbx", "old.kdb", "pw.psafe3", "1p.agilekeychain", "login.keychain-db", "kde.kwallet",
    "wallet.dat", "keystore/UTC--2024-01-02T03-04-05.0Z--0123abcd", "oracle/cwallet.sso",
    # keys
    "server.ppk", "deploy_rsa", "ci/github_ed25519", "otr.private_key", ".gnupg/private-keys-v1.d/x.key",
    "bundle.pkcs12", "config/master.key",
    # files named for secrets
    "secrets.yml", "config/secrets.yaml", ".streamlit/secrets.toml", "secrets.json", "secrets.env",
    "secrets.txt", "secrets.prod.yaml", "secret_token.rb",
    # VPN, remote access, FTP clients
    "office.ovpn", "wg0.conf", "etc/wireguard/home.conf", "mac.tblk", "server.rdp", "sftp-config.json",
    ".ftpconfig", ".remote-sync.json", ".vscode/sftp.json", "FileZilla.xml", "recentservers.xml",
    # infrastructure state
    "prod.tfstate", "envs/prod.tfstate.backup", ".terraformrc", "terraform.rc",
]

NOT_SECRET = [
    "src/main.rs", "README.md", "environment.py", "env/lib.py", ".env.example", ".env.sample", ".env.template",
    "app/.env.local.example", ".ENV.EXAMPLE", "id_rsa.pub", "keys/id_ed25519.pub", "src/id_utils.py",
    "keys.py", "monkey.keystore.md", "secrets", "docs/secrets.md", "secret", "config", ".kube/config.yaml",
    "docker/config.json", "history.md", "tfvars.md", "key", "pem", "bak", ".bak", "~",
    "notes.bak", "my.env", "dotenv",
    # negative controls for the survey's additions: documentation, code, templates, public halves
    "environment.md", "secrets.md", "docs/SECRETS.md", "src/secrets.py", "pkg/secrets.go", "lib/secrets.ts",
    "secrets.example.yml", "config/secrets.yml.example", "secrets.sample.json", "deploy_rsa.pub",
    "id_ed25519.pub", ".git/HEAD", ".git/hooks/pre-commit", ".gitignore", ".gitattributes", "hosts.yml",
    "ansible/hosts.yml", "my.cnf.md", "kubeconfig.md", "wget.conf", "wireguard.md", "wallet.md",
    "tsconfig-base.json", "package.json", "locale/messages.json", "gh/README.md", "service.json",
    ".docker/daemon.json", "mysql/my.cnf.example", "keys.md",
    # the singular forms' negative controls
    "tokenizer.py", "secret.md", "src/secret.py", "secret.example.json", "config/secret.yml.example",
    "credential.md", "src/credential.rs", "credential.sample.json", "credential_helper.py", "secretary.txt",
]


@pytest.mark.parametrize("text", SECRET)
def test_secret_like(text):
    match = classify_secret(parse_file_path(text).parts, shipped_secret_patterns())
    assert match is not None, text
    assert match.pattern.source.startswith("config/secret_paths.txt:")
    assert not match.pattern.exception


SINGULAR_SECRET = ["secret.json", "config/secret.yml", "secret.toml", "secret.txt", "secret/token",
                   "app/secret/key.txt", "credential.json", "gcp/credential.yaml", ".streamlit/secret.toml",
                   "secret.env"]


@pytest.mark.parametrize("text", SINGULAR_SECRET)
def test_singular_forms_of_each_family_are_secret_like(text):
    match = classify_secret(parse_file_path(text).parts, shipped_secret_patterns())
    assert match is not None and not match.pattern.exception, text


@pytest.mark.parametrize("text", MORE_SECRET)
def test_credential_files_from_the_survey(text):
    match = classify_secret(parse_file_path(text).parts, shipped_secret_patterns())
    assert match is not None, text
    assert not match.pattern.exception


@pytest.mark.parametrize("text", NOT_SECRET)
def test_not_secret_like(text):
    assert classify_secret(parse_file_path(text).parts, shipped_secret_patterns()) is None, text


def test_match_reason_names_component_pattern_and_line():
    match = classify_secret(("app", ".NetRC.old"), shipped_secret_patterns())
    reason = match.reason()
    assert "'.NetRC.old'" in reason and "'.netrc'" in reason and "config/secret_paths.txt:" in reason
    line = int(match.pattern.source.rsplit(":", 1)[1])
    from importlib import resources

    text = resources.files("peon._config").joinpath("secret_paths.txt").read_text()
    assert text.splitlines()[line - 1].strip() == ".netrc"


def test_lexical_normalization_happens_before_matching():
    assert classify_secret(parse_file_path("src/../.env").parts, shipped_secret_patterns()) is not None
    # a directory pattern needs something inside the directory
    assert classify_secret(parse_file_path("secrets/../notes").parts, shipped_secret_patterns()) is None


def test_backup_variants():
    assert backup_variants(".Env.bak~") == [".env.bak~", ".env.bak", ".env"]
    assert backup_variants("x.old.old") == ["x.old.old", "x.old", "x"]
    assert backup_variants(".bak") == [".bak"]
    assert backup_variants("~") == ["~"]


def test_last_matching_line_decides_and_later_lines_win():
    base = parse_secret_patterns(".env.*\n!.env.example\n", "base")
    assert classify_secret((".env.example",), base) is None
    user = parse_secret_patterns(".env.example\n", "user")
    assert classify_secret((".env.example",), base + user).pattern.source == "user:1"
    opt_out = parse_secret_patterns("!.env.ci\n", "user")
    assert classify_secret((".env.ci",), base + opt_out) is None
    assert classify_secret((".env.prod",), base + opt_out) is not None


def test_pattern_kinds():
    patterns = parse_secret_patterns("vault/\nconf/prod.yaml\nstate/db/\n*.SECRET\n", "p")
    assert classify_secret(("vault",), patterns) is None  # a directory pattern needs a path inside
    assert classify_secret(("a", "VAULT", "x"), patterns).component == "VAULT"
    assert classify_secret(("x", "conf", "prod.yaml"), patterns).component == "conf/prod.yaml"
    assert classify_secret(("conf", "x", "prod.yaml"), patterns) is None
    assert classify_secret(("state", "db"), patterns) is None
    assert classify_secret(("state", "db", "f"), patterns).component == "state/db"
    assert classify_secret(("a.secret",), patterns) is not None
    assert classify_secret((), patterns) is None


def test_format_comments_blank_lines_and_whitespace():
    patterns = parse_secret_patterns("# comment\n\n   token.txt   \n\t# indented comment\n", "f")
    assert [p.text for p in patterns] == ["token.txt"]
    assert patterns[0].source == "f:3"


@pytest.mark.parametrize("line, words", [
    ("/etc/shadow", "absolute"),
    ("a/../b", "'..'"),
    ("a//b", "empty"),
    ("./x", "'.'"),
    ("!a/b", "single component"),
])
def test_bad_patterns_name_file_and_line(line, words):
    with pytest.raises(ConfigError) as info:
        parse_secret_patterns(f"ok\n{line}\n", "/home/u/.config/peon/secret_paths.txt")
    assert "/home/u/.config/peon/secret_paths.txt:2" in info.value.message
    assert words in info.value.message
    assert info.value.code.value == "config_invalid"


def _line_by_line(parts, patterns):
    """The rule as written in the list's header, one line at a time: what classify_secret must agree with."""
    from fnmatch import fnmatchcase

    singles = [p for p in patterns if len(p.globs) == 1]
    runs = [p for p in patterns if len(p.globs) > 1]
    variants = [backup_variants(c) for c in parts]
    for index, component in enumerate(parts):
        for variant in variants[index]:
            decided = None
            for pattern in singles:
                if not (pattern.directory and index == len(parts) - 1) and fnmatchcase(variant, pattern.globs[0]):
                    decided = pattern
            if decided is not None and not decided.exception:
                return decided.text, component
        for pattern in runs:
            end = index + len(pattern.globs)
            if end > len(variants) or (pattern.directory and end >= len(variants)):
                continue
            if all(any(fnmatchcase(v, g) for v in variants[index + i]) for i, g in enumerate(pattern.globs)):
                return pattern.text, "/".join(parts[index:end])
    return None


COMPONENTS = [".env", ".env.example", "id_rsa", "id_rsa.pub", ".ssh", ".aws", "credentials", "config", ".git",
              "secrets.yaml", ".npmrc", "src", "docs", "README.md", "key.pem", ".kube", "token", "x.bak", "~",
              ".docker", "config.json", "gcloud", "application_default_credentials.json", ".netrc", "a"]


def test_the_fast_path_decides_as_the_list_reads_line_by_line():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    user = parse_secret_patterns("*.special\n!keep.special\nvault/\nteam/*/notes.txt\n", "user:1")
    lists = [shipped_secret_patterns(), shipped_secret_patterns() + user]
    component = st.one_of(st.sampled_from(COMPONENTS), st.sampled_from(["keep.special", "v.special", "vault", "team",
                                                                       "notes.txt"]),
                          st.text(alphabet="abc.~_-*", min_size=1, max_size=6))

    @settings(max_examples=400, deadline=None)
    @given(st.lists(component, min_size=1, max_size=5), st.sampled_from([0, 1]))
    def check(parts, which):
        patterns = lists[which]
        found = classify_secret(parts, patterns)
        assert (None if found is None else (found.pattern.text, found.component)) == _line_by_line(parts, patterns)

    check()
