"""The redaction module: what it finds, what it puts instead, and a stream cut anywhere (fake credentials
in the real formats only)."""

from __future__ import annotations

import base64
import hashlib
import os
import time
import uuid

import pytest

from peon.core.redaction.redactor import Redactor, summary, value_hash
from peon.core.redaction.rules import secret_like_name
from peon.core.redaction.sources import assigned_secrets, environment_secrets, session_redactor
from peon.core.redaction.stream import HOLD_BYTES, StreamRedactor

GITHUB = "ghp_" + "A1b2C3d4E5" * 3 + "f6G7h8"
AWS_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
KEY_BLOCK = ("-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(["MIIEowIBAAKCAQEA" + "x" * 48] * 20)
             + "\n-----END RSA PRIVATE KEY-----")
FORMATS = {
    "github_token": GITHUB,
    "github_token ": "github_pat_11ABCDEFG0" + "abcdefghij" * 6,
    "gitlab_token": "glpat-" + "aB3dE6gH9jK2mN5pQ8sT",
    "slack_token": "xoxb-123456789012-1234567890123-" + "AbCdEfGhIjKlMnOpQrStUvWx",
    "stripe_key": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "anthropic_key": "sk-ant-api03-" + "Ab3Cd4Ef5Gh6Ij7Kl8Mn9Op0",
    "openai_key": "sk-proj-" + "Ab3Cd4Ef5Gh6Ij7Kl8Mn9Op0Qr",
    "google_api_key": "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "aws_access_key": AWS_ID,
    "jwt": JWT,
    "private_key": KEY_BLOCK,
}


def leaks(text: bytes | str, secret: str) -> bool:
    data = text if isinstance(text, bytes) else text.encode()
    return secret.encode() in data


@pytest.mark.parametrize("kind", sorted(FORMATS))
def test_each_format_is_redacted_with_its_kind_and_a_hash(kind: str) -> None:
    secret = FORMATS[kind]
    redacted = Redactor(key=b"session").redact(f"before {secret} after\n".encode())
    assert not leaks(redacted.data, secret)
    assert f"«redacted:{kind.strip()}:{value_hash(b'session', secret.encode())}»".encode() in redacted.data
    assert redacted.data.startswith(b"before ") and redacted.data.endswith(b" after\n")
    assert redacted.counts == {kind.strip(): 1}


def test_context_formats_redact_the_secret_only() -> None:
    redactor = Redactor(key=b"k")
    text = (f"DATABASE_URL=postgres://app:s3cr3t-Pa55@db.internal:5432/app\n"
            f"aws_secret_access_key = {AWS_SECRET}\n"
            f"curl -H 'Authorization: Bearer abc123def456ghi789jkl' https://api\n")
    out = redactor.redact_text(text)
    assert "s3cr3t-Pa55" not in out and AWS_SECRET not in out and "abc123def456ghi789jkl" not in out
    assert "postgres://app:«redacted:url_password:" in out and "@db.internal:5432/app" in out
    assert "Authorization: Bearer «redacted:bearer_token:" in out


def test_placeholders_in_urls_are_not_secrets() -> None:
    text = "postgres://user:password@localhost/db https://user:${PASS}@host http://a:***@b"
    assert Redactor().redact_text(text) == text


def test_the_same_value_has_the_same_hash_and_another_session_another() -> None:
    one, other = Redactor(key=b"one"), Redactor(key=b"two")
    first = one.redact_text(f"{GITHUB} {GITHUB}")
    marks = first.split(" ")
    assert marks[0] == marks[1]
    assert one.redact_text(GITHUB) != other.redact_text(GITHUB)


def test_literals_longest_first_and_counted() -> None:
    redactor = Redactor({b"hunter2hunter2": "env:DB_PASSWORD", b"hunter2hunter2-extra": "env:API_TOKEN"}, key=b"k")
    counts: dict[str, int] = {}
    from collections import Counter
    tally: Counter[str] = Counter()
    out = redactor.redact_text("a hunter2hunter2-extra b hunter2hunter2 c", tally)
    counts.update(tally)
    assert "hunter2" not in out
    assert counts == {"env:API_TOKEN": 1, "env:DB_PASSWORD": 1}
    assert summary(tally) == {"count": 2, "kinds": {"env:API_TOKEN": 1, "env:DB_PASSWORD": 1}}


def test_allow_patterns_keep_a_value_of_their_kind() -> None:
    redactor = Redactor(key=b"k", allow={"jwt": (r".*",), "github_token": (r"ghp_A1b2.*",)})
    text = f"{JWT} {GITHUB} {AWS_ID}"
    out = redactor.redact_text(text)
    assert JWT in out and GITHUB in out and AWS_ID not in out


def test_redact_value_walks_json() -> None:
    from collections import Counter
    tally: Counter[str] = Counter()
    value = {"output": f"x {GITHUB}", "lines": [GITHUB, 3, None], GITHUB: True}
    out = Redactor(key=b"k").redact_value(value, tally)
    assert GITHUB not in repr(out) and tally["github_token"] == 3


def test_secret_like_names() -> None:
    for name in ("GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "STRIPE_KEY", "MY_SECRET", "AWS_SESSION_TOKEN",
                 "OPENAI_API_KEY", "PGPASSWORD"):
        assert secret_like_name(name), name
    for name in ("PATH", "HOME", "PWD", "OLDPWD", "KEYBOARD", "SSH_AUTH_SOCK", "AWS_REGION", "LANG", "TERM"):
        assert not secret_like_name(name), name


def test_environment_secrets_need_a_secret_name_and_length() -> None:
    env = {"GITHUB_TOKEN": GITHUB, "API_KEY": "short", "HOME": "/home/someone-with-long-name", "PATH": "/usr/bin:/bin"}
    assert environment_secrets(env) == {GITHUB.encode(): "env:GITHUB_TOKEN"}


def test_assigned_secrets_of_an_environment_file() -> None:
    text = (f"# comment\nexport AWS_ACCESS_KEY_ID={AWS_ID}\nAWS_SECRET_ACCESS_KEY=\"{AWS_SECRET}\"\n"
            "DEBUG=true\nDATABASE_HOST=localhost.localdomain\nSESSION_SALT=Zq8Xv2Lm9Nc4Bt7Wr1Ys\n")
    found = assigned_secrets(text)
    assert found == {AWS_ID.encode(): "file:AWS_ACCESS_KEY_ID", AWS_SECRET.encode(): "file:AWS_SECRET_ACCESS_KEY",
                     b"Zq8Xv2Lm9Nc4Bt7Wr1Ys": "file:SESSION_SALT"}


def test_session_redactor_reads_the_workspace_environment_files(tmp_path) -> None:
    (tmp_path / ".env").write_text("STRIPE_WEBHOOK_SECRET=whsec_plainvalue12345\n")
    (tmp_path / ".env.example").write_text("STRIPE_WEBHOOK_SECRET=whsec_examplevalue999\n")
    os.symlink("/etc/passwd", tmp_path / ".env.local")
    env = {"GITHUB_TOKEN": GITHUB}
    redactor = session_redactor(env, tmp_path, "sid")
    out = redactor.redact_text(f"{GITHUB} whsec_plainvalue12345 whsec_examplevalue999")
    assert "whsec_plainvalue12345" not in out and GITHUB not in out and "whsec_examplevalue999" in out
    # A file just written is read again at each call (its time stamp could not show a second change)...
    (tmp_path / ".env").write_text("STRIPE_WEBHOOK_SECRET=whsec_othervalue123456\n")
    assert "whsec_othervalue123456" not in session_redactor(env, tmp_path, "sid").redact_text("whsec_othervalue123456")
    # ...and once its time stamps are old enough, the same redactor serves while nothing changes.
    for path in (tmp_path, tmp_path / ".env", tmp_path / ".env.example"):
        os.utime(path, (1_000_000_000, 1_000_000_000))
    settled = session_redactor(env, tmp_path, "sid")
    assert session_redactor(env, tmp_path, "sid") is settled
    assert "whsec_othervalue123456" not in settled.redact_text("whsec_othervalue123456")


@pytest.mark.parametrize(("whole_second", "margin_ns"), [(True, 2_000_000_000), (False, 20_000_000)])
def test_a_listing_taken_too_soon_after_a_change_is_taken_again(tmp_path, whole_second, margin_ns) -> None:
    """The workspace listed within the margin after its last change (2 s for a stamp of a whole second, a
    coarse file system; 20 ms for a finer one, the kernel's clock), then given a .env whose creation leaves
    that time as it was (as a change within the same clock tick would): after the margin, the .env is found."""
    from peon.core.redaction.sources import workspace_secrets

    target = time.time_ns() - margin_ns // 2
    changed = target - target % 1_000_000_000 + 1_000_000_000 if whole_second else \
        target - target % 1_000_000 + 123_456
    os.utime(tmp_path, ns=(changed, changed))
    assert workspace_secrets(tmp_path) == {}
    (tmp_path / ".env").write_text("API_TOKEN=tick-value-1234567890\n")
    os.utime(tmp_path, ns=(changed, changed))
    old = time.time_ns() - 10_000_000_000
    os.utime(tmp_path / ".env", ns=(old, old))
    time.sleep(max(0.0, (changed + margin_ns - time.time_ns()) / 1e9) + 0.01)
    assert workspace_secrets(tmp_path) == {b"tick-value-1234567890": "file:API_TOKEN"}


def _streamed(redactor: Redactor, data: bytes, cuts: list[int]) -> tuple[bytes, StreamRedactor]:
    stream = StreamRedactor(redactor)
    pieces, at = [], 0
    for cut in [*cuts, len(data)]:
        pieces.append(stream.feed(data[at:cut]))
        at = cut
    pieces.append(stream.finish())
    return b"".join(pieces), stream


def test_a_stream_cut_anywhere_gives_what_the_whole_gives() -> None:
    redactor = Redactor({b"literal-secret-value": "env:X_TOKEN"}, key=b"k")
    text = (f"start\nexport T={GITHUB}\nAuthorization: Bearer abc123def456ghi789jkl\n{KEY_BLOCK}\n"
            f"url postgres://u:pa55word1@db/x and literal-secret-value {JWT} end").encode()
    whole = redactor.redact(text).data
    for cut in range(1, len(text)):
        streamed, _ = _streamed(redactor, text, [cut])
        assert streamed == whole, cut
    streamed, stream = _streamed(redactor, text, list(range(1, len(text))))  # a byte at a time
    assert streamed == whole
    assert stream.counts["github_token"] == 1 and stream.counts["private_key"] == 1


def test_what_a_stream_emits_never_ends_in_half_a_secret() -> None:
    stream = StreamRedactor(Redactor(key=b"k"))
    # What goes out stops before the token's first bytes (and the byte before them, which a format that
    # must not continue a word looks at); a prompt ending a stream goes out whole.
    assert stream.feed(b"line one\ntoken " + GITHUB[:10].encode()) == b"line one\ntoken"
    assert stream.held == 1 + 10
    rest = stream.feed(GITHUB[10:].encode() + b"\n")
    assert GITHUB[10:].encode() not in rest and b"\xc2\xabredacted:github_token:" in rest


def test_a_stream_holds_a_bounded_tail() -> None:
    stream = StreamRedactor(Redactor(key=b"k"))
    out = stream.feed(b"." * (10 * HOLD_BYTES))  # a long line without a newline, nothing of a secret in it
    assert len(out) == 10 * HOLD_BYTES and stream.held == 0
    assert stream.feed(b"." * (2 * HOLD_BYTES) + b" gh") == b"." * (2 * HOLD_BYTES)  # " gh" may start a token
    assert stream.held == 3
    stream.feed(KEY_BLOCK.encode()[:100])
    assert stream.held <= HOLD_BYTES + 100
    assert b"MIIE" not in stream.finish()  # a key block cut short is redacted to where it stops


def test_a_prompt_goes_out_at_once_and_a_secret_typed_after_it_is_caught() -> None:
    """A program waiting for input is seen waiting: its prompt is not held for a newline that never comes."""
    stream = StreamRedactor(Redactor({b"literal-secret-value": "env:X_TOKEN"}, key=b"k"))
    assert stream.feed(b"Python 3\n>>> ") == b"Python 3\n>>> "
    assert stream.feed(b"Continue? [y/N] ") == b"Continue? [y/N] "
    assert stream.feed(b"echo lit") == b"echo"  # " lit" may be the start of the session's secret
    rest = stream.feed(b"eral-secret-value\n>>> ")
    assert b"literal" not in rest and b"\xc2\xabredacted:env:X_TOKEN:" in rest and rest.endswith(b">>> ")


def test_ordinary_output_has_no_false_positives() -> None:
    redactor = Redactor({b"not-in-the-text-at-all": "env:A_TOKEN"}, key=b"k")
    lines = [str(uuid.uuid4()) for _ in range(2000)]
    lines += [hashlib.sha1(str(i).encode()).hexdigest() for i in range(2000)]
    lines += [base64.b64encode(os.urandom(60)).decode() for _ in range(2000)]
    lines += ["commit 3f2a9c1d0e8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f", "https://github.com/org/repo.git",
              "git@github.com:org/repo.git", "sk-learn is a name", "def get_token(self, key): return self.tokens[key]",
              "Authorization: Bearer <token>", "postgres://localhost/db", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG host"]
    text = "\n".join(lines)
    assert redactor.redact_text(text) == text


def test_a_cut_through_a_secret_leaves_neither_half() -> None:
    from collections import Counter

    from peon.core.redaction.cuts import redact_cut

    redactor = Redactor({b"Lit3ral-Secret-Value": "env:X_TOKEN"}, key=b"k")
    counts: Counter[str] = Counter()
    secret = GITHUB.encode()
    head = b"line\nexport T=" + secret[:12]
    tail = secret[12:] + b"\nnext line\n"
    assert secret[:12] not in redact_cut(redactor, head, counts, cut_after=True)
    assert secret[12:] not in redact_cut(redactor, tail, counts, cut_before=True)
    assert b"Lit3ral" not in redact_cut(redactor, b"x Lit3ral-Se", counts, cut_after=True)
    assert b"et-Value" not in redact_cut(redactor, b"ret-Value y", counts, cut_before=True)
    assert b"pa55" not in redact_cut(redactor, b"url postgres://user:pa55", counts, cut_after=True)
    assert b"abc123def456" not in redact_cut(redactor, b"Authorization: Bearer abc123def456", counts, cut_after=True)
    body = KEY_BLOCK.encode()[200:]  # the block's beginning was cut off
    assert b"MIIE" not in redact_cut(redactor, body + b"\nafter\n", counts, cut_before=True)
    assert counts["partial"] == 7


def test_a_cut_through_ordinary_text_changes_nothing() -> None:
    from collections import Counter

    from peon.core.redaction.cuts import redact_cut

    redactor = Redactor({b"Lit3ral-Secret-Value": "env:X_TOKEN"}, key=b"k")
    counts: Counter[str] = Counter()
    for data in (b"aaaaaaaaaaaa", b"123456\n", b"some words here", b"a" * 5000, b"line one\nline tw"):
        assert redact_cut(redactor, data, counts, cut_before=True, cut_after=True) == data
    assert not counts


def test_head_and_tail_are_redacted_at_their_cut() -> None:
    from collections import Counter

    from peon.core.output.truncation import HeadTail
    from peon.core.redaction.cuts import redact_cut

    redactor = Redactor(key=b"k")
    counts: Counter[str] = Counter()
    capture = HeadTail(200)
    capture.feed(b"h" * 90 + GITHUB.encode() + b"m" * 1000 + GITHUB.encode() + b"t" * 80)
    text = capture.render(None, lambda data, before, after: redact_cut(redactor, data, counts, cut_before=before,
                                                                      cut_after=after)).text
    assert GITHUB[:6] not in text and GITHUB[-6:] not in text and counts["partial"] == 2


def test_mcp_log_messages_carry_no_credential() -> None:
    from peon.mcp.logs import LogFeed

    feed = LogFeed(level="debug")
    message = feed.message("notice", {"event": "approval", "tool": "bash", "call_id": GITHUB}, 1.0)
    assert message is not None and GITHUB not in repr(message)
    assert message["params"]["data"]["call_id"].startswith("«redacted:github_token:")


def _view(tmp_path, env: dict[str, str], overrides: dict | None = None):
    from peon.client.config import load_config
    from peon.core.config_view import ResolvedConfig
    from peon.core.tool import SessionView

    loaded = load_config(overrides or {}, env={"XDG_CONFIG_HOME": str(tmp_path / "none")})
    return SessionView(workspace=tmp_path, config=ResolvedConfig(loaded.to_wire()).config, env=env, session_id="s1")


def test_a_reply_is_redacted_whole_and_says_what_was(tmp_path) -> None:
    from peon.supervisor.redaction import redact_reply

    view = _view(tmp_path, {"GITHUB_TOKEN": GITHUB})
    reply = {"ok": True, "value": {"output": f"{GITHUB}\n{JWT}", "redacted": {"count": 1, "kinds": {"partial": 1}}},
             "notes": [f"a hook saw {GITHUB}"]}
    out = redact_reply(view, reply)
    assert GITHUB not in repr(out) and JWT not in repr(out)
    assert out["value"]["redacted"] == {"count": 4, "kinds": {"env:GITHUB_TOKEN": 2, "jwt": 1, "partial": 1}}
    failed = redact_reply(view, {"ok": False, "error": {"code": "tool_failed", "message": f"bad {GITHUB}"}})
    assert GITHUB not in repr(failed) and failed["error"]["details"]["redacted"]["count"] == 1
    assert redact_reply(view, reply, as_is=True) is reply
    off = _view(tmp_path, {"GITHUB_TOKEN": GITHUB}, {"redaction": {"enabled": False}})
    assert redact_reply(off, reply) is reply


def test_only_a_secret_path_read_allowed_as_such_is_deliberate() -> None:
    from peon.approval.policy import ApprovalRequest, Decision
    from peon.core.risk import ToolRisk
    from peon.supervisor.redaction import deliberate

    def request(reason: str) -> ApprovalRequest:
        return ApprovalRequest(call_id="c", tool="read", risk=ToolRisk.FILESYSTEM, risk_reason=reason, summary="read",
                               details={}, canonical_input="{}")

    secret = request("secret-like path: '.env' matches '.env' (secret_paths.txt:1)")
    assert deliberate("read", secret, Decision(True, "approver", "asked"))
    assert not deliberate("read", secret, Decision(False, "approver", "denied"))
    assert not deliberate("bash", secret, Decision(True, "approver", "asked"))
    assert not deliberate("read", request("declared risk of read"), Decision(True, "policy", "allow"))


def test_an_audit_line_is_redacted_whole_when_what_it_recorded_holds_a_secret(tmp_path) -> None:
    from peon.supervisor.redaction import audited

    view = _view(tmp_path, {"GITHUB_TOKEN": GITHUB})
    plain = {"event": "result", "session_id": "s1", "input": {"command": "git status"}, "risk_reason": "declared"}
    assert audited(view, plain) is plain
    line = {"event": "decision", "input": {"command": f"curl -H 'Authorization: Bearer {GITHUB}' https://api"},
            "decision": {"rule": "approval.process = allow"}, "input_sha256": "0" * 64}
    out = audited(view, line)
    assert GITHUB not in repr(out) and out["input_sha256"] == "0" * 64
    assert "«redacted:env:GITHUB_TOKEN:" in out["input"]["command"]
