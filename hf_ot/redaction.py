"""Secrets kept out of everything hf_ot writes or prints: a credential field's value (hub_token, ...), the value of
HF_TOKEN / HUGGING_FACE_HUB_TOKEN, the password of a URL and anything shaped like a Hugging Face token become REDACTED
in files, cards, results, logs and error messages, also where they appear inside other text (a path, a dataset name)."""

from __future__ import annotations

import math
import os
import re

REDACTED = "<redacted>"

_TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")  # huggingface_hub reads both
# a URL's user:password (or token@), also as a path prints it (Path() makes :// :/) and with a / in the password (an
# S3 secret key), and an access token
_USERINFO = r"(?<=[A-Za-z0-9]:/)/?([^/\s@:]*:[^\s@]*|[^/\s@]+)(?=@)"
_SHAPED = re.compile(_USERINFO + r"|\bhf_[A-Za-z0-9]{30,}\b")
# a URL's query value named as a credential (?token=, &X-Amz-Signature=, &sig=, &password=, &api_key=)
_QUERY = re.compile(r"(?i)([?&][\w.-]*(?:token|sig|signature|secret|password|passwd|key|credential|auth)=)[^&\s#'\")]+")
_SECRETS: set[str] = set()  # values of secret fields this process has seen: hidden wherever else they appear too


def is_secret_key(key) -> bool:
    """A field that may hold a credential (token, hub_token, api_token, ...), not a count or id (max_new_tokens)."""
    name = str(key).lower().rsplit(".", 1)[-1]
    return name == "token" or name.endswith("_token") and not name.endswith(_SPECIAL_TOKENS)


_SPECIAL_TOKENS = tuple(f"{t}_token" for t in ("bos", "eos", "pad", "unk", "sep", "cls", "mask"))  # a tokenizer's


def hide_secrets(text: str) -> str:
    """text with the token variables' values, every secret field's value this process has seen and what is shaped
    like a secret (_SHAPED) replaced by REDACTED."""
    variables = {os.environ.get(name) or "" for name in _TOKEN_VARIABLES}
    for secret in sorted({*variables, *_SECRETS}, key=len, reverse=True):
        text = text.replace(secret, REDACTED) if len(secret) >= 4 else text
    text = _SHAPED.sub(lambda m: m.group(0)[: m.group(0).startswith("/")] + REDACTED, text)
    return _QUERY.sub(lambda m: m.group(1) + REDACTED, text)


def remember_secrets(value) -> None:
    """Note the values (8 characters or more) of *token fields and the passwords of URLs at any depth: hide_secrets
    hides them from now on, wherever they appear (a path made of the URL, an error of a library)."""
    if isinstance(value, dict):
        _SECRETS.update(v for k, v in value.items() if isinstance(v, str) and len(v) >= 8 and is_secret_key(k))
    if isinstance(value, str):
        for found in re.finditer(_USERINFO, value):
            _SECRETS.update(p for p in (found.group(1), found.group(1).partition(":")[2]) if len(p) >= 4)
        _SECRETS.update(v for v in (m.group(0).partition("=")[2] for m in _QUERY.finditer(value)) if len(v) >= 4)
    for v in value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ():
        remember_secrets(v)


def redact_secrets(value, key=None):
    """A copy for a file, card or terminal: secret fields' values REDACTED (also in other text), NaN/inf null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if key is None:
        remember_secrets(value)
    if isinstance(value, dict):
        return {k: redact_secrets(v, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_secrets(v) for v in value]
    if isinstance(value, str) and value and key is not None and is_secret_key(key):
        return REDACTED
    return hide_secrets(value) if isinstance(value, str) else value
