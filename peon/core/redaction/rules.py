"""What looks like a credential: well-known formats, and which names mark a variable's value as one.

Promise: :data:`FORMAT_RULES` is the one list of credential formats recognised in any text (each a
kind, a compiled bytes pattern, and which group is the secret: the whole match or only the part after
a known prefix, as the password in ``scheme://user:PASSWORD@host``). Every pattern starts with a
literal, which the regular expression engine skips to at ``bytes.find`` speed, so text holding none
of them costs one fast pass per rule. :func:`secret_like_name` says whether an
environment variable's name marks its value as a secret; :func:`long_enough` whether a value is long
enough to be one. Pure: no I/O.

The formats follow the maintained rule sets of detect-secrets 1.5.0 (Yelp: its AWS, GitHub, GitLab,
Slack, Stripe, OpenAI, JWT, private key and basic-auth plugins) and gitleaks (Anthropic, GitHub
fine-grained, Google API keys, bearer headers), narrowed to their anchored forms: each starts with a
fixed prefix or sits in a fixed context, so ordinary text (hashes, UUIDs, base64) does not match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MIN_SECRET_LENGTH = 8  # a variable's value shorter than this is not taken for a secret
KEY_BLOCK_BYTES = 16384  # a private key block is redacted whole up to this size (an RSA-4096 PEM is ~3.3 KiB)
KEY_BEGIN = b"-----BEGIN"


@dataclass(frozen=True)
class FormatRule:
    kind: str
    pattern: re.Pattern[bytes]  # starts with a literal: the regular expression engine skips to it at ``find`` speed
    group: int = 0  # the group that is the secret itself
    edge: bool = False  # a match must not continue a word: the byte before it is no token character
    # Formats that share their first bytes are one pattern (one pass over the text): each match's kind
    # is then that of the first of these prefixes it starts with, else ``kind``.
    kinds: tuple[tuple[bytes, str], ...] = ()
    # The literals every match starts with (one of them): where a one-pass scanner of all the rules'
    # starts (peon.core.redaction.scan) lets ``pattern`` try a match.
    starts: tuple[bytes, ...] = ()

    def kind_of(self, data: bytes, start: int) -> str:
        for prefix, kind in self.kinds:
            if data.startswith(prefix, start):
                return kind
        return self.kind


def _rule(kind: str, pattern: bytes, starts: tuple[bytes, ...], group: int = 0, edge: bool = False,
          kinds: tuple[tuple[bytes, str], ...] = ()) -> FormatRule:
    return FormatRule(kind, re.compile(pattern), group, edge, kinds, starts)


TOKEN_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_END = rb"(?![A-Za-z0-9_\-])"  # a token ends at a word edge
_KEY_LINE = rb"[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----"
_AWS_SECRET = rb"[\"']?\s*[=:]\s*[\"']?([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"
_HEADER_VALUE = rb"[ \t]+(?=\S*[0-9])([A-Za-z0-9._~+/\-]{16,4096}=*)(?![A-Za-z0-9._~+/=\-])"

FORMAT_RULES: tuple[FormatRule, ...] = (
    # A block cut short (``head`` of a key file, or one past the bound) is redacted to where it stops.
    _rule("private_key", KEY_BEGIN + _KEY_LINE + rb"(?:[\s\S]{0,%d}?-----END" % KEY_BLOCK_BYTES + _KEY_LINE
          + rb"|[\s\S]{0,%d})" % KEY_BLOCK_BYTES, (KEY_BEGIN,)),
    # AWS access key ids and Google API keys.
    _rule("aws_access_key", rb"A(?:(?:KIA|SIA|BIA|CCA)[A-Z0-9]{16}|Iza[0-9A-Za-z_\-]{35})" + _END,
          (b"AKIA", b"ASIA", b"ABIA", b"ACCA", b"AIza"), edge=True,
          kinds=((b"AIza", "google_api_key"),)),
    *(_rule("aws_secret_key", name + _AWS_SECRET, (name,), 1)
      for name in (b"_SECRET_ACCESS_KEY", b"_secret_access_key", b"SecretAccessKey")),
    _rule("github_token", rb"gh[pousr]_[A-Za-z0-9]{36,255}" + _END,
          (b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_"), edge=True),
    _rule("github_token", rb"github_pat_[A-Za-z0-9_]{22,255}" + _END, (b"github_pat_",), edge=True),
    _rule("gitlab_token", rb"gl(?:pat|dt|rt|ptt|cbt|oas)-[A-Za-z0-9_\-]{20,255}" + _END,
          (b"glpat-", b"gldt-", b"glrt-", b"glptt-", b"glcbt-", b"gloas-"), edge=True),
    _rule("slack_token", rb"xox[abposr]-[A-Za-z0-9\-]{10,255}" + _END,
          (b"xoxa-", b"xoxb-", b"xoxp-", b"xoxo-", b"xoxs-", b"xoxr-"), edge=True),
    _rule("slack_webhook", rb"https://hooks\.slack\.com/services/[A-Za-z0-9+/]{40,100}",
          (b"https://hooks.slack.com/services/",)),
    # Stripe secret keys, Anthropic and OpenAI keys.
    _rule("openai_key", rb"sk(?:_(?:live|test)_[A-Za-z0-9]{16,255}|-ant-[A-Za-z0-9_\-]{20,255}"
                        rb"|-(?:proj-|svcacct-|admin-)?(?=[A-Za-z0-9_\-]*[0-9])(?=[A-Za-z0-9_\-]*[A-Z])"
                        rb"[A-Za-z0-9_\-]{20,255})" + _END,
          (b"sk_live_", b"sk_test_", b"sk-"), edge=True,
          kinds=((b"sk_", "stripe_key"), (b"sk-ant-", "anthropic_key"))),
    _rule("stripe_key", rb"rk_(?:live|test)_[A-Za-z0-9]{16,255}" + _END, (b"rk_live_", b"rk_test_"), edge=True),
    _rule("jwt", rb"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}" + _END, (b"eyJ",),
          edge=True),
    # scheme://user:PASSWORD@host: the password only.
    _rule("url_password", rb"://[^\s/:@\"'<>]{1,128}:([^\s/@\"'<>]{1,256})@[A-Za-z0-9\[]", (b"://",), 1),
    _rule("bearer_token", rb"uthorization:[ \t]*(?:[Bb]asic|[Tt]oken|[Bb]earer)" + _HEADER_VALUE,
          (b"uthorization:",), 1),
    _rule("bearer_token", rb"earer" + _HEADER_VALUE, (b"earer",), 1),
)

# What a piece of a format's token starts with: after a cut, a run of bytes holding one of these may be
# the beginning of a secret whose rest was cut off.
FORMAT_PREFIXES: tuple[bytes, ...] = (
    KEY_BEGIN, b"AKIA", b"ASIA", b"ABIA", b"ACCA", b"_SECRET_ACCESS_KEY", b"_secret_access_key", b"SecretAccessKey",
    b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_", b"github_pat_", b"glpat-", b"gldt-", b"glrt-", b"glptt-", b"glcbt-",
    b"gloas-", b"xoxa-", b"xoxb-", b"xoxp-", b"xoxo-", b"xoxs-", b"xoxr-", b"hooks.slack.com", b"sk_live_",
    b"sk_test_", b"rk_live_", b"rk_test_", b"sk-", b"AIza", b"eyJ",
)

# Names whose value is a secret: *_TOKEN, *_SECRET, *_KEY, *PASSWORD*, AWS_*, and their close kin.
_SECRET_NAME = re.compile(
    r"(?:^|_)(?:TOKEN|SECRET|KEY|APIKEY|PASSWD|PASS|PWD|CREDENTIALS?|AUTH)(?:$|_)|PASSWORD|^AWS_|SECRET|TOKEN|PRIVATE_KEY",
    re.IGNORECASE)
# ...but not these, whose values are paths or switches, never credentials (and are everywhere).
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD", "SSH_AUTH_SOCK", "GPG_AGENT_INFO", "AWS_REGION",
                               "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_CONFIG_FILE",
                               "AWS_SHARED_CREDENTIALS_FILE", "AWS_DEFAULT_OUTPUT", "AWS_PAGER"})


def secret_like_name(name: str) -> bool:
    """Whether a variable named ``name`` holds a secret by its name alone."""
    return name.upper() not in _NOT_SECRET_NAMES and _SECRET_NAME.search(name) is not None


def long_enough(value: str) -> bool:
    """Whether ``value`` is long enough to be a secret (short ones would be redacted everywhere they occur)."""
    return len(value.strip()) >= MIN_SECRET_LENGTH


def variable_kind(name: str) -> str:
    """The kind a variable's value is redacted as: ``env:NAME`` so the agent can say which one it saw."""
    return "env:" + re.sub(r"[^A-Za-z0-9_]", "_", name)[:64]
