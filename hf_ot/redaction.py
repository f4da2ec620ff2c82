"""Secrets kept out of everything hf_ot writes or prints: a credential field's value (hub_token, ...) and the value of
HF_TOKEN become REDACTED in files, cards, results, logs and error messages, also where they appear inside other
text (a path, a dataset name)."""

from __future__ import annotations

import math
import os

REDACTED = "<redacted>"

_SECRETS: set[str] = set()  # values of secret fields this process has seen: hidden wherever else they appear too


def is_secret_key(key) -> bool:
    """A field that may hold a credential (token, hub_token, api_token, ...), not a count or id (max_new_tokens)."""
    name = str(key).lower().rsplit(".", 1)[-1]
    return name == "token" or name.endswith("_token") and not name.endswith(_SPECIAL_TOKENS)


_SPECIAL_TOKENS = tuple(f"{t}_token" for t in ("bos", "eos", "pad", "unk", "sep", "cls", "mask"))  # a tokenizer's


def hide_secrets(text: str) -> str:
    """text with HF_TOKEN's value and every secret field's value this process has seen replaced by REDACTED."""
    for secret in sorted({os.environ.get("HF_TOKEN") or "", *_SECRETS}, key=len, reverse=True):
        text = text.replace(secret, REDACTED) if len(secret) >= 4 else text
    return text


def remember_secrets(value) -> None:
    """Note the values (8 characters or more) of *token fields at any depth: hide_secrets hides them from now on."""
    if isinstance(value, dict):
        _SECRETS.update(v for k, v in value.items() if isinstance(v, str) and len(v) >= 8 and is_secret_key(k))
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
