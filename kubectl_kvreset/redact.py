"""One redaction for everything that leaves the plugin: rows (table, wide, JSON, YAML), notes
and errors on stderr, logs at every ``-v`` level, remedies. Pure: no I/O, no imports of this
package, so every layer (the adapter included) can use it.

What is a secret here:

- the values of a command-line flag named like a secret (:func:`is_secret_name`: a name whose
  ``_ . - :``/camelCase segments hold ``token``, ``secret``, ``password``, ``key``,
  ``credential(s)``, ``cookie``, ``signature``, ``requirepass``, ``masterauth``, or end in
  ``auth``, ``pass``, ``pwd``, ``sas``, ``sig``, ``session``: ``--hf-token``, ``--api-key``,
  ``--oidc-client-secret``, ``REDISCLI_AUTH``), in both ``--flag value`` and ``--flag=value``
  forms, every value up to the next flag (vLLM's ``--api-key k1 k2``), also in a Python list
  repr (``'--api-key', 'k'``); a flag followed by another flag (or by nothing) is a boolean
  and has no value; also an abbreviation of a secret flag (:func:`is_secret_flag`: vLLM's
  parser takes ``--hf-tok`` for ``--hf-token``), redis-cli's ``-a pw``/``-apw`` and the
  password of curl's ``-u user:pw``;
- the password of a URL (``redis://user:pw@host`` -> ``redis://user:***@host``, the userinfo
  ending at the URL's last ``@``, also across spaces, ``rediss://:pw with space@host``; a user
  with no password, ``redis://tok@host``, is taken to be a token: ``redis://***@host``), and
  secret query parameters (``&sig=``, ``&token=``);
- in a JSON object (a ``--kv-transfer-config`` argument, ``kv_connector_extra_config`` at any
  depth, a kubeconfig or Secret read as a mapping) the value of every key named like a secret
  (``lmcache.api_key``, ``password``, ``client-key-data``, ``auth``, ``pwd``), and any string
  inside that looks like one of the forms above; a list of strings is a command line only
  under an argv-shaped key (:data:`ARGV_KEYS`);
- in free text: ``NAME=value`` and ``NAME: value`` where NAME is named like a secret
  (``HF_TOKEN=...``, ``token=...`` from a plugin's stderr; a password's value to the end of
  its field), the whole value of an ``Authorization``/``Proxy-Authorization`` header, and
  ``Bearer``/``Basic`` credentials.

What is not: the flags' names, boolean flags (``--enable-prefix-caching``), other flags' values
(``--max-model-len 4096``, ``--kv-cache-dtype fp8``), a model name, a host and port. The names
follow the rule vLLM itself uses for its API keys (``--api-key``, ``VLLM_API_KEY``) and the
kubeconfig fields client-go treats as secret (``token``, ``client-key-data``, ``password``:
``k8s.io/client-go/tools/clientcmd/api/types.go``, printed as ``REDACTED`` by ``kubectl config
view``).
"""

from __future__ import annotations

import json
import re
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "ARGV_KEYS", "MASK",
    "is_secret_flag", "is_secret_name",
    "redact_argv", "redact_text", "redact_traceback", "redact_url", "redact_value",
]

#: What a secret is replaced by.
MASK = "***"
#: Values that are masks already (``liveconfig`` and the ``-v 8`` header log write ``<redacted>``).
_ALREADY_MASKED = frozenset({MASK, "<redacted>"})

#: Words that make a name secret wherever they stand in it (its segments split on ``_ . - :``
#: and camelCase): ``HF_TOKEN``, ``client-key-data``, ``oidc-client-secret``, ``lmcache.api_key``,
#: ``X-Amz-Signature``, ``AWS_SHARED_CREDENTIALS``; redis-server's ``requirepass`` and
#: ``masterauth`` (``redis.conf``).
_STRONG_WORDS = frozenset({"token", "secret", "secrets", "password", "passwd", "passphrase", "key", "apikey",
                           "credential", "credentials", "authorization", "cookie", "cookies", "signature",
                           "requirepass", "masterauth", "privatekey", "accesskey", "sshpass"})
#: Endings that make a one-word segment secret: ``authtoken``, ``PGPASSWORD``, ``accesstoken``.
_STRONG_ENDINGS = ("token", "password", "passwd", "secret")
#: Words that make a name secret only as its last segment: ``REDISCLI_AUTH``, ``REDIS_PASS``,
#: ``DB_PWD``, ``sas``, ``sig`` (Azure SAS query parameters), ``session``; not ``pass_through``,
#: ``auth_mode`` or ``session_timeout``.
_LAST_WORDS = frozenset({"auth", "pass", "pwd", "sas", "sig", "session"})
#: Last segments that make a secret-looking name a count, size or kind (``key_count``, vLLM's
#: ``--long-prefill-token-threshold``, ``auth_type``).
_NOT_SECRET_LAST = frozenset({"count", "counts", "threshold", "budget", "id", "ids", "limit", "size", "len",
                              "length", "type", "dtype", "mode", "prefix", "pattern", "format", "ttl", "timeout",
                              "enabled"})
#: Whole names that hold no secret although a segment says so: ``key`` and ``keys`` (a Secret
#: key's name, a count), the shell's working directory ``PWD``/``OLDPWD``.
_NOT_SECRET_NAMES = frozenset({"key", "keys", "PWD", "OLDPWD"})
#: Long flags whose value is a secret and which a parser may take abbreviated: Python's argparse
#: (``allow_abbrev``, on in vLLM's ``FlexibleArgumentParser``) accepts any unambiguous prefix,
#: so ``--hf-tok t`` sets vLLM's ``hf_token`` and ``--api-ke k`` its ``api_key``. These are the
#: flags of the vLLM 0.32 ``serve`` parser named like a secret whose value is one (its
#: ``--ssl-keyfile`` is a path to a file, no secret, and ``--allow-credentials`` a boolean),
#: ``--admin-api-key`` of other vLLM releases and ``--token`` (``huggingface-cli``,
#: ``hf auth login``). An ambiguous prefix (``--api``) is masked too: the safe side.
_ABBREVIABLE_SECRET_FLAGS = ("--hf-token", "--api-key", "--admin-api-key", "--token")
#: The shortest abbreviation read as one, in characters after ``--``.
_MIN_ABBREV = 3
#: Short flags whose value is a secret: redis-cli's ``-a <password>`` (``redis-cli --help``).
_SECRET_SHORT_FLAGS = frozenset({"-a"})
#: Flags whose value is ``user:password`` (curl's ``-u``/``--user``, ``-U``/``--proxy-user``):
#: the part after the first ``:`` is masked.
_USERPASS_FLAGS = frozenset({"-u", "--user", "-U", "--proxy-user"})
#: Programs whose ``-a`` takes its password attached (``-apw``): redis-cli and its forks.
_REDIS_CLI = re.compile(r"(?:redis|valkey|keydb)-cli$")
#: A quick test before the segment split: any of the words above inside a name.
_SECRET_WORD = r"(?:token|secret|pass|pwd|key|credential|auth|cookie|signature|sas|sig|session)"
_SECRET_NAME = re.compile(_SECRET_WORD, re.I)
_SEGMENT_SPLIT = re.compile(r"[_.:\-]+|(?<=[a-z0-9])(?=[A-Z])")
#: Names whose value is a password that may hold spaces: in free text it is masked to the end
#: of its field (``;``, ``,``, a newline, a closing quote), not to the first space.
_PASSWORD_LAST = frozenset({"password", "passwd", "passphrase", "pass", "pwd", "requirepass", "masterauth"})

# scheme://[user][:password]@ -> the password (or a lone user, a token) masked; a password may
# hold "@" or "/" (unescaped, as redis-cli and redis-py accept it): the userinfo ends at the last
# "@" of the URL
_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)(?P<user>[^/@\s:'\"]*)(?::(?P<pw>[^\s'\"]*))?@", re.I)
# the same with a password that holds spaces (redis-cli -u and redis-py take it unescaped): from
# the ":" to the last "@" of the line, when its first word holds no "@" and is no port
_URL_SPACED_PW = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)(?P<user>[^/@\s:'\"]*):"
                            r"(?!\d+(?:[/\s'\"]|$))[^\s@'\"]*[ \t][^\r\n'\"]*@", re.I)
# Authorization: Bearer xxx / Basic xxx
# (credentials of 8 characters or more, so that prose such as "the basic layout" stays)
_AUTH_SCHEME = re.compile(r"\b(Bearer|bearer|BEARER|Basic)(\s+)[A-Za-z0-9._~+/=-]{8,}")
# an Authorization or Proxy-Authorization header (any scheme: Token, Digest, AWS4-HMAC-SHA256):
# its whole value, to the closing quote, a ";" or the end of the line (not a ",": Digest and
# AWS4-HMAC-SHA256 credentials hold commas)
_AUTH_HEADER = re.compile(
    r"(?P<name>(?<![\w-])(?:Proxy-)?Authorization)(?P<q>[\"']?)(?P<sep>\s*[:=]\s*)"
    r"(?P<value>\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^\r\n;]*[^\s;)])", re.I)
# one value of a flag in text: quoted, or a word that is no flag and no shell operator
_TEXT_VALUE = r"(?:'[^']*'|\"[^\"]*\"|(?!-)[^\s'\";|&]+)"
# a flag named like a secret with its values, in text: --hf-token abc, --api-key=abc, -a 'x y',
# --api-key k1 k2 (vLLM's --api-key takes several: every word up to the next flag)
# (any long flag, for its abbreviations, and -a; the callback keeps the others)
_FLAG_NAME = r"(?:--?[\w.-]*" + _SECRET_WORD + r"[\w.-]*|--[\w.-]{" + str(_MIN_ABBREV) + r",}|-a)"
_FLAG_IN_TEXT = re.compile(
    r"(?P<flag>(?<![\w-])" + _FLAG_NAME + r")"
    r"(?P<sep>=|[ \t]+)(?P<value>" + _TEXT_VALUE + r"(?:[ \t]+" + _TEXT_VALUE + r")*)", re.I)
# the same in a Python list repr (a traceback, a logged argv): '--api-key', 'k1', 'k2'
_FLAG_IN_REPR = re.compile(
    r"(?P<q>['\"])(?P<flag>" + _FLAG_NAME + r")(?P=q)"
    r"(?P<values>(?:\s*,\s*(?:'(?!-)[^']*'|\"(?!-)[^\"]*\"))+)", re.I)
_REPR_ITEM = re.compile(r"'(?!-)[^']*'|\"(?!-)[^\"]*\"")
# curl -u user:pw, --user=user:pw, -uuser:pw: the password (not redis-cli's -u URL: its password
# is a URL's)
_USERPASS_IN_TEXT = re.compile(
    r"(?P<head>(?<![\w-])(?:-u|--user|-U|--proxy-user)(?:=|[ \t]+|(?=[^\s-]))(?P<q>['\"])?[^\s:'\"]*:(?!//))"
    r"(?P<pw>(?(q)[^'\"\r\n]+|[^\s'\"]+))")
# redis-cli -apw (the password attached to -a), on a line that runs redis-cli
_ATTACHED_A_IN_TEXT = re.compile(
    r"(?P<head>\b(?:redis|valkey|keydb)-cli\b[^\r\n;|&]*?(?<![\w-])-a)(?P<pw>[^\s'\"-][^\s'\"]*)")
# NAME=value, NAME: value, "NAME": "value" (env, YAML, JSON, logfmt, a query string), NAME named
# like a secret; a password's unquoted value runs to the end of its field (it may hold spaces), an
# object's (DOCKER_AUTH_CONFIG={...}) to the last "}" of the line
_ASSIGN_IN_TEXT = re.compile(
    r"(?P<q>[\"']?)(?P<name>(?<![\w.-])[\w.-]*" + _SECRET_WORD + r"[\w.-]*)(?P=q)(?P<sep>\s*[:=]\s*)"
    r"(?P<value>\"(?:[^\"\\]|\\.)*\"|'[^']*'|\[[^\]]*\]|\{[^\r\n]*\}|"
    r"(?P<word>[^\s,;&#'\"}\])]+)(?P<more>[^\r\n,;'\"]*))", re.I)


def is_secret_name(name: str) -> bool:
    """True for a flag, key or variable name that holds a secret (``--hf-token``, ``api_key``,
    ``lmcache.api_key``, ``HF_TOKEN``, ``password``, ``client-key-data``, ``REDISCLI_AUTH``,
    ``private_key``); False for names that only hold such a word inside another word or as a
    count or kind (``author``, ``passthrough``, ``pass_through``, ``keyword``, ``key_count``,
    ``valkey``, ``max-num-batched-tokens``). The name is split into segments on ``_ . - :`` and
    camelCase and read with :data:`_STRONG_WORDS`, :data:`_LAST_WORDS`, :data:`_NOT_SECRET_LAST`."""
    bare = name.lstrip("-").strip()
    if not bare or not _SECRET_NAME.search(bare) or bare in _NOT_SECRET_NAMES:
        return False
    segments = [seg.lower() for seg in _SEGMENT_SPLIT.split(bare) if seg]
    if not segments or segments[-1] in _NOT_SECRET_LAST:
        return False
    if segments[-2:] == ["auth", "config"]:  # DOCKER_AUTH_CONFIG: a registry's credentials
        return True
    return segments[-1] in _LAST_WORDS or any(seg in _STRONG_WORDS or seg.endswith(_STRONG_ENDINGS)
                                              for seg in segments)


def is_secret_flag(flag: str) -> bool:
    """True for a command-line flag whose value is a secret: one named like a secret
    (:func:`is_secret_name`), an abbreviation of at least :data:`_MIN_ABBREV` characters of one
    of :data:`_ABBREVIABLE_SECRET_FLAGS` (``--hf-tok``, ``--api-ke``, ``--admin``), or one of
    :data:`_SECRET_SHORT_FLAGS` (redis-cli's ``-a``). ``flag`` is the flag alone (no ``=value``)."""
    if flag in _SECRET_SHORT_FLAGS or is_secret_name(flag):
        return True
    return flag.startswith("--") and not flag.startswith("---") and len(flag) - 2 >= _MIN_ABBREV and \
        any(known.startswith(flag) for known in _ABBREVIABLE_SECRET_FLAGS)


def _is_password_name(name: str) -> bool:
    segments = [seg.lower() for seg in _SEGMENT_SPLIT.split(name.lstrip("-").strip()) if seg]
    return bool(segments) and segments[-1] in _PASSWORD_LAST


def redact_url(url: str) -> str:
    """``url`` with its password masked: ``redis://user:pw@host`` -> ``redis://user:***@host``,
    ``redis://:pw@host`` -> ``redis://:***@host``, ``redis://tok@host`` -> ``redis://***@host``.
    Text without a URL comes back unchanged; several URLs in one string are each redacted."""

    def one(m: re.Match[str]) -> str:
        if m.group("pw") is None:
            return f"{m.group('scheme')}{MASK}@" if m.group("user") else m.group(0)
        return f"{m.group('scheme')}{m.group('user')}:{MASK}@"

    url = _URL_SPACED_PW.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:{MASK}@", url)
    return _URL_USERINFO.sub(one, url)


def _json_arg(text: str) -> str | None:
    """A JSON object or array argument with its secrets masked (compact JSON; ``text`` itself,
    spacing and all, when it holds none), or None when ``text`` is not one."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "{[":
        return None
    try:
        doc = json.loads(stripped)
    except ValueError:
        return None
    masked = redact_value(doc)
    return text if masked == doc else json.dumps(masked, separators=(",", ":"))


def redact_text(text: str) -> str:
    """Free text (a message, a log line, a traceback, a shell command) with every secret form of
    the module docstring masked; everything else is left as it is."""
    if not text:
        return text

    def flag(m: re.Match[str]) -> str:
        if not is_secret_flag(m.group("flag")):
            return m.group(0)
        if m.group("flag") in _SECRET_SHORT_FLAGS:  # one value: redis-cli -a pw ping
            value = re.match(_TEXT_VALUE, m.group("value"))
            rest = m.group("value")[value.end():] if value else ""
            return f"{m.group('flag')}{m.group('sep')}{MASK}{rest}"
        return f"{m.group('flag')}{m.group('sep')}{MASK}"

    def repr_flag(m: re.Match[str]) -> str:
        if not is_secret_flag(m.group("flag")):
            return m.group(0)
        values = _REPR_ITEM.sub(lambda v: f"{v.group(0)[0]}{MASK}{v.group(0)[0]}", m.group("values"))
        return f"{m.group('q')}{m.group('flag')}{m.group('q')}{values}"

    def header(m: re.Match[str]) -> str:
        value = m.group("value")
        quote = value[0] if value[:1] in ("'", '"') else ""
        if any(value.strip(quote).startswith(masked) for masked in _ALREADY_MASKED):
            return m.group(0)
        return f"{m.group('name')}{m.group('q')}{m.group('sep')}{quote}{MASK}{quote}"

    def assign(m: re.Match[str]) -> str:
        if not is_secret_name(m.group("name")):
            return m.group(0)
        value = m.group("value")
        quote = value[0] if value[:1] in ("'", '"') else ""
        if not value.strip(quote) or value.strip(quote) in _ALREADY_MASKED or \
                (m.group("word") is not None and m.group("word") in _ALREADY_MASKED):
            return m.group(0)  # an empty or already masked value says nothing
        rest = ""
        if m.group("word") is not None:
            more = m.group("more") or ""
            # a password runs to the end of its field; any other value ends at its first space
            rest = more[len(more.rstrip()):] if _is_password_name(m.group("name")) \
                else _ASSIGN_IN_TEXT.sub(assign, more)
        return f"{m.group('q')}{m.group('name')}{m.group('q')}{m.group('sep')}{quote}{MASK}{quote}{rest}"

    text = redact_url(text)
    text = _AUTH_HEADER.sub(header, text)
    text = _AUTH_SCHEME.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _FLAG_IN_REPR.sub(repr_flag, text)
    text = _FLAG_IN_TEXT.sub(flag, text)
    text = _USERPASS_IN_TEXT.sub(lambda m: m.group(0) if m.group("pw") in _ALREADY_MASKED
                                 else f"{m.group('head')}{MASK}", text)
    text = _ATTACHED_A_IN_TEXT.sub(lambda m: m.group(0) if m.group("pw") in _ALREADY_MASKED
                                   else f"{m.group('head')}{MASK}", text)
    return _ASSIGN_IN_TEXT.sub(assign, text)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line with the values of secret flags masked (``["--api-key", "k"]`` ->
    ``["--api-key", "***"]``, ``"--hf-token=t"`` -> ``"--hf-token=***"``), JSON arguments
    redacted field by field (``--kv-transfer-config '{...}'``), and every other argument
    redacted as text (URLs, ``NAME=value``, a ``sh -c`` script). Every value up to the next flag
    is masked: vLLM's ``--api-key`` takes several (``api_key: list[str] | None`` in vLLM 0.32's
    ``vllm/entrypoints/launchers/cli_args.py``, ``openai/cli_args.py`` before; a ``--config``
    file's ``api-key: [a, b]`` becomes ``--api-key a b``), and a flag this module does not know
    may too. A secret-named flag followed by another flag, or last, is a boolean and stays as it
    is."""
    out: list[str] = []
    masking = single = userpass = redis_cli = False
    for raw in argv:
        arg = str(raw)
        if masking and not arg.startswith("-"):
            out.append(MASK)
            masking = not single
            continue
        masking = False
        if userpass and not arg.startswith("-"):
            userpass = False
            user, colon, rest = arg.partition(":")
            out.append(redact_text(arg) if not colon or rest.startswith("//") else f"{user}:{MASK}")
            continue
        userpass = False
        if arg.startswith("-") and len(arg) > 1:
            name, eq, value = arg.partition("=")
            if eq:
                if is_secret_flag(name):
                    out.append(f"{name}={MASK}")
                elif name in _USERPASS_FLAGS and ":" in value and "://" not in value:
                    out.append(f"{name}={value.partition(':')[0]}:{MASK}")
                else:
                    as_json = _json_arg(value)
                    out.append(f"{name}={as_json if as_json is not None else redact_text(value)}")
                continue
            if redis_cli and arg.startswith("-a") and not arg.startswith("--") and len(arg) > 2:
                out.append(f"-a{MASK}")  # redis-cli -apw
                continue
            if arg[:2] in ("-u", "-U") and len(arg) > 2 and ":" in arg and "://" not in arg:
                out.append(f"{arg.partition(':')[0]}:{MASK}")  # curl -uuser:pw
                continue
            masking = is_secret_flag(name) and not name.startswith("---")
            single = name in _SECRET_SHORT_FLAGS  # redis-cli -a pw: one value
            userpass = name in _USERPASS_FLAGS
            out.append(redact_text(arg) if "://" in arg else arg)  # -uredis://user:pw@host
            continue
        redis_cli = redis_cli or bool(_REDIS_CLI.search(arg))
        as_json = _json_arg(arg)
        out.append(as_json if as_json is not None else redact_text(arg))
    return out


#: Mapping keys whose list of strings is a command line (the rows' ``argv``, a container's
#: ``command``/``args``, a kubeconfig exec plugin's ``args``); any other list of strings is
#: redacted item by item as text.
ARGV_KEYS = frozenset({"argv", "args", "command", "cmd", "cmdline"})


def redact_value(value: Any, *, argv: bool = False) -> Any:
    """A copy of a JSON-like value (rows, a parsed kubeconfig, a Secret's ``data``) with secrets
    masked: a mapping entry whose key is named like a secret (:func:`is_secret_name`) and whose
    value is a string, number or a container gets :data:`MASK`, as does the ``value`` of an
    EnvVar-shaped mapping whose ``name`` is a secret's (``{"name": "HF_TOKEN", "value": ...}``).
    A list of strings under a key of :data:`ARGV_KEYS` (or the whole ``value`` when ``argv``) is
    read as a command line (:func:`redact_argv`); any other string as text
    (:func:`redact_text`), or as a JSON argument when it is one, so a note that mentions a flag
    leaves the next note alone. Booleans and None stay (a flag's on/off is no secret)."""
    if isinstance(value, Mapping):
        if is_secret_name(str(value.get("name") or "")) and isinstance(value.get("value"), (str, int, float)) \
                and not isinstance(value.get("value"), bool) and value.get("value") != "":
            # a Kubernetes EnvVar ({"name": "HF_TOKEN", "value": "..."})
            value = {**value, "value": MASK}
        out: dict[Any, Any] = {}
        for k, v in value.items():
            if is_secret_name(str(k)) and v is not None and not isinstance(v, bool) and v != "":
                out[k] = MASK
            else:
                out[k] = redact_value(v, argv=str(k).lower() in ARGV_KEYS)
        return out
    if isinstance(value, (list, tuple)):
        if argv and value and all(isinstance(v, str) for v in value):
            return redact_argv(value)
        return [redact_value(v) for v in value]
    if isinstance(value, str):
        as_json = _json_arg(value)
        return as_json if as_json is not None else redact_text(value)
    return value


def redact_traceback(exc: BaseException | None) -> str:
    """The ``-v 6`` traceback of ``exc``: for each frame its file, line and function only (no
    source lines, no values of locals: a code line such as ``credential = run(cfg["exec"])``
    is neither useful redacted nor safe unredacted), then each exception's type and message
    through :func:`redact_text`; chained causes as Python prints them.
    An empty string for None."""
    if exc is None:
        return ""
    chain: list[tuple[traceback.TracebackException, str]] = []
    te: traceback.TracebackException | None = traceback.TracebackException.from_exception(
        exc, lookup_lines=False, capture_locals=False)
    link = ""
    while te is not None:
        chain.append((te, link))
        if te.__cause__ is not None:
            te, link = te.__cause__, "The above exception was the direct cause of the following exception:"
        elif te.__context__ is not None and not te.__suppress_context__:
            te, link = te.__context__, "During handling of the above exception, another exception occurred:"
        else:
            te = None
    lines: list[str] = []
    for te, link in reversed(chain):  # the first cause first, as Python prints them
        if te.stack:
            lines.append("Traceback (most recent call last):")
            lines += [f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}' for frame in te.stack]
        lines += [redact_text(line.rstrip("\n")) for line in te.format_exception_only()]
        if link:
            lines += ["", link, ""]
    return "\n".join(lines)
