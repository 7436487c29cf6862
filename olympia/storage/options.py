"""Storage options in one vocabulary: PyIceberg's S3 properties or s3fs's own
option names, turned into the keyword arguments of ``s3fs.S3FileSystem``.

Everything that opens a catalog takes the same keys: ``storage_options`` in
Python, ``-o KEY=VALUE`` of the ``olympia`` command line (every command,
``olympia serve`` too) and of the main job, and the properties of the
PyIceberg catalog ``olympia.iceberg.OlympiaCatalog``.

* PyIceberg's keys (:data:`S3_PROPERTIES`), e.g. ``s3.endpoint``,
  ``s3.region``, ``s3.access-key-id``, ``s3.secret-access-key``,
  ``s3.session-token``; values may be text, as a command line gives them,
  and are converted where s3fs needs a number or a flag. ``client.region``,
  ``client.access-key-id``, ``client.secret-access-key``,
  ``client.session-token`` and ``client.profile-name`` are PyIceberg's
  fall-backs, used when the ``s3.*`` key is absent.
* s3fs's own names (``endpoint_url``, ``key``, ``secret``, ``token``,
  ``client_kwargs``, ``config_kwargs``, ...) pass through unchanged, except
  that text given for one of s3fs's flags or counts is converted.

Refused with :class:`~olympia.errors.InvalidArgumentError` naming the key:
an ``s3.*`` key that is not one of PyIceberg's (a typo such as
``s3.endpiont`` is never ignored), one of PyIceberg's that olympia's storage
cannot honour (a request signer, an assumed role), a value that is not the
number or flag the key needs, and two keys that set one s3fs setting to
different values (``s3.endpoint`` and ``endpoint_url``, say). When the
caller knows which names s3fs takes, an unknown plain name is refused too;
so is text s3fs needs given as something else (``endpoint_url=5``), a
mapping option given as something else, and a ``config_kwargs`` entry
botocore's ``Config`` does not take.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from olympia.errors import InvalidArgumentError

__all__ = [
    "FSSPEC_EXTRA_NAMES",
    "S3_PROPERTIES",
    "pyiceberg_properties",
    "s3fs_options",
    "storage_properties",
]

Path = tuple[str, ...]


@dataclass(frozen=True)
class _Property:
    """Where a PyIceberg property goes among s3fs's options.

    ``kind`` is ``text`` (the value as text), ``number`` (a float), ``flag``
    (``true``/``false``: with ``when_true`` None the flag itself is the
    value, otherwise ``when_true`` is set when true and nothing when false)
    or ``proxy`` (the same URI for http and https).
    """

    path: Path
    kind: str = "text"
    when_true: object = None


#: PyIceberg's S3 properties (pyiceberg.io, 0.12) that olympia's storage
#: honours, and the s3fs option each sets. ``s3.path-style-access`` is
#: Iceberg Java's name (the main job gives it to Spark as well).
S3_PROPERTIES: dict[str, _Property] = {
    "s3.endpoint": _Property(("endpoint_url",)),
    "s3.access-key-id": _Property(("key",)),
    "s3.secret-access-key": _Property(("secret",)),
    "s3.session-token": _Property(("token",)),
    "s3.region": _Property(("client_kwargs", "region_name")),
    "s3.profile-name": _Property(("profile",)),
    "s3.anonymous": _Property(("anon",), "flag"),
    "s3.resolve-region": _Property(("cache_regions",), "flag"),
    "s3.proxy-uri": _Property(("config_kwargs", "proxies"), "proxy"),
    "s3.connect-timeout": _Property(("config_kwargs", "connect_timeout"), "number"),
    "s3.request-timeout": _Property(("config_kwargs", "read_timeout"), "number"),
    "s3.force-virtual-addressing": _Property(
        ("config_kwargs", "s3", "addressing_style"), "flag", "virtual"
    ),
    "s3.path-style-access": _Property(("config_kwargs", "s3", "addressing_style"), "flag", "path"),
    "s3.server-side-encryption": _Property(("s3_additional_kwargs", "ServerSideEncryption")),
    "s3.sse-kms-key-id": _Property(("s3_additional_kwargs", "SSEKMSKeyId")),
}

#: PyIceberg's fall-backs for some ``s3.*`` keys (``get_first_property_value``).
CLIENT_FALLBACKS = {
    "client.region": "s3.region",
    "client.access-key-id": "s3.access-key-id",
    "client.secret-access-key": "s3.secret-access-key",
    "client.session-token": "s3.session-token",
    "client.profile-name": "s3.profile-name",
}

#: PyIceberg's S3 properties that olympia's storage (s3fs) cannot honour:
#: ignoring them would reach S3 with other credentials or settings than asked.
UNSUPPORTED = {
    "s3.signer": "a remote request signer",
    "s3.signer.uri": "a remote request signer",
    "s3.signer.endpoint": "a remote request signer",
    "s3.role-arn": "an assumed IAM role",
    "s3.role-session-name": "an assumed IAM role",
    "s3.retry-strategy-impl": "a PyArrow retry strategy",
}

#: Names s3fs takes besides those of ``S3FileSystem.__init__``: fsspec's
#: instance and listings caches, and what s3fs hands to botocore's session.
FSSPEC_EXTRA_NAMES = frozenset(
    {
        "skip_instance_cache",
        "use_listings_cache",
        "listings_expiry_time",
        "max_paths",
        "profile",
        "session_vars",
    }
)

#: s3fs options that are flags or counts: text given for them is converted.
_FSSPEC_TYPES: dict[str, type] = {
    "anon": bool,
    "use_ssl": bool,
    "requester_pays": bool,
    "version_aware": bool,
    "cache_regions": bool,
    "default_fill_cache": bool,
    "fixed_upload_size": bool,
    "local_expiry_check": bool,
    "skip_instance_cache": bool,
    "use_listings_cache": bool,
    "default_block_size": int,
    "max_concurrency": int,
    "max_paths": int,
    "listings_expiry_time": float,
}

#: s3fs options that are mappings; their entries are compared one by one.
_NESTED = frozenset({"client_kwargs", "config_kwargs", "s3_additional_kwargs"})

#: s3fs options whose value is text (an endpoint, credentials, a profile).
_FSSPEC_TEXT = frozenset(
    {"endpoint_url", "key", "secret", "token", "username", "password", "profile"}
)

_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def is_storage_property(key: str) -> bool:
    """Whether a PyIceberg catalog property is a storage option
    (every ``s3.*`` key, and PyIceberg's ``client.*`` fall-backs)."""
    return key.startswith("s3.") or key in CLIENT_FALLBACKS


def storage_properties(properties: Mapping[str, Any]) -> dict[str, Any]:
    """The storage options among PyIceberg catalog ``properties``, as given
    (empty ones left out, as PyIceberg's FileIO leaves them out)."""
    return {k: v for k, v in properties.items() if is_storage_property(k) and v not in (None, "")}


def s3fs_options(
    options: Mapping[str, Any] | None, *, s3fs_names: Collection[str] | None = None
) -> dict[str, Any]:
    """The ``s3fs.S3FileSystem`` keyword arguments for storage ``options``
    given in either vocabulary (see the module docstring).

    ``s3fs_names``: the plain names s3fs takes; when given, any other plain
    name is refused (``endpiont_url`` is a typo, not an option).

    Raises:
        InvalidArgumentError: an unknown or unsupported ``s3.*`` key, a value
            of the wrong kind, two keys that disagree, or (with
            ``s3fs_names``) a name s3fs does not take.
    """
    if not options:
        return {}
    leaves: dict[Path, tuple[object, str]] = {}

    def put(path: Path, value: object, source: str) -> None:
        for other, (known, by) in leaves.items():
            shorter = min(len(other), len(path))
            if other[:shorter] != path[:shorter]:
                continue
            if other == path and _same(known, value):
                return
            raise InvalidArgumentError(
                f"storage options {by!r} and {source!r} disagree: {_show(by, known)} "
                f"against {_show(source, value)}; give one of them"
            )
        leaves[path] = (value, source)

    given = {str(k): v for k, v in options.items()}
    for key, value in given.items():
        if key.startswith("s3."):
            for path, converted in _from_property(key, value):
                put(path, converted, key)
        elif key in CLIENT_FALLBACKS:
            if CLIENT_FALLBACKS[key] not in given:
                for path, converted in _from_property(CLIENT_FALLBACKS[key], value, key):
                    put(path, converted, key)
        else:
            if s3fs_names is not None and key not in s3fs_names and key not in FSSPEC_EXTRA_NAMES:
                raise InvalidArgumentError(_unknown(key, [*s3fs_names, *FSSPEC_EXTRA_NAMES]))
            _check_kind(key, value)
            for path, leaf in _flatten((key,), value):
                put(path, _typed(key, path, leaf), _source(path))
    out: dict[str, Any] = {}
    for path, (value, _) in leaves.items():
        target = out
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = value
    return out


def pyiceberg_properties(options: Mapping[str, Any] | None) -> dict[str, str]:
    """PyIceberg catalog properties equal to storage ``options`` given in
    either vocabulary: the inverse of :func:`s3fs_options`.

    Raises:
        InvalidArgumentError: as :func:`s3fs_options`, or an s3fs option
            that no PyIceberg property expresses.
    """
    leaves = dict(_flatten((), s3fs_options(options)))
    out: dict[str, str] = {}
    for name, prop in S3_PROPERTIES.items():
        if prop.kind == "proxy":
            http, https = (*prop.path, "http"), (*prop.path, "https")
            if leaves.get(http) is not None and leaves.get(https) == leaves[http]:
                out[name] = str(leaves.pop(http))
                del leaves[https]
            continue
        if prop.path not in leaves:
            continue
        value = leaves[prop.path]
        if prop.kind == "flag" and prop.when_true is None:
            out[name] = "true" if value else "false"
        elif prop.kind == "flag":
            if value != prop.when_true:
                continue
            out[name] = "true"
        else:
            out[name] = str(value)
        del leaves[prop.path]
    if leaves:
        path = next(iter(leaves))
        raise InvalidArgumentError(
            f"storage option {_source(path)!r} has no PyIceberg property "
            f"(those are: {', '.join(S3_PROPERTIES)})"
        )
    return out


# --- helpers -------------------------------------------------------------------------


def _from_property(key: str, value: object, given_as: str | None = None) -> list[tuple[Path, Any]]:
    """The s3fs leaves PyIceberg property ``key`` sets (``given_as``: the
    name the caller used, for messages)."""
    shown = given_as or key
    prop = S3_PROPERTIES.get(key)
    if prop is None:
        if key in UNSUPPORTED:
            raise InvalidArgumentError(
                f"storage option {shown!r} ({UNSUPPORTED[key]}) is not supported by "
                f"olympia's S3 storage (s3fs); supported: {', '.join(S3_PROPERTIES)}"
            )
        raise InvalidArgumentError(_unknown(shown, S3_PROPERTIES))
    if prop.kind == "number":
        return [(prop.path, _number(shown, value, float))]
    if prop.kind == "flag":
        flag = _flag(shown, value)
        if prop.when_true is None:
            return [(prop.path, flag)]
        return [(prop.path, prop.when_true)] if flag else []
    text = _text(shown, value)
    if prop.kind == "proxy":
        return [((*prop.path, "http"), text), ((*prop.path, "https"), text)]
    return [(prop.path, text)]


def _flatten(path: Path, value: object) -> Iterator[tuple[Path, object]]:
    """The leaves of an s3fs option: the entries of its nested mappings
    (``client_kwargs``, ``config_kwargs``, ...) one by one."""
    if isinstance(value, Mapping) and (len(path) != 1 or path[0] in _NESTED):
        for k, v in value.items():
            yield from _flatten((*path, str(k)), v)
    elif path:
        yield path, value


def _check_kind(key: str, value: object) -> None:
    """Refuse a value of the wrong kind for an s3fs option olympia knows:
    text for an endpoint or credentials, a mapping for ``client_kwargs``,
    ``config_kwargs`` and ``s3_additional_kwargs``, and in ``config_kwargs``
    only what botocore's ``Config`` takes (checked here rather than at the
    first request, where the error would not name the option)."""
    if key in _FSSPEC_TEXT and value is not None:
        _text(key, value)
    elif key in _NESTED:
        if not isinstance(value, Mapping):
            raise InvalidArgumentError(
                f"storage option {key!r} must be a mapping of settings, got {value!r}"
            )
        if key == "config_kwargs":
            from botocore.config import Config

            unknown = sorted(str(k) for k in value if k not in Config.OPTION_DEFAULTS)
            if unknown:
                raise InvalidArgumentError(
                    f"storage option 'config_kwargs' holds {unknown}, which botocore's Config "
                    f"does not take"
                )


def _typed(key: str, path: Path, value: object) -> object:
    kind = _FSSPEC_TYPES.get(key) if len(path) == 1 else None
    if kind is None or not isinstance(value, str):
        return value
    if kind is bool:
        return _flag(key, value)
    return _number(key, value, kind)


def _source(path: Path) -> str:
    return path[0] + "".join(f"[{part!r}]" for part in path[1:])


def _text(key: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"storage option {key!r} must be non-empty text, got {value!r}")
    return value


def _flag(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidArgumentError(f"storage option {key!r} must be true or false, got {value!r}")


def _number(key: str, value: object, kind: type) -> Any:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InvalidArgumentError(f"storage option {key!r} must be a number, got {value!r}")
    try:
        number = kind(value)
    except ValueError:
        raise InvalidArgumentError(
            f"storage option {key!r} must be a number, got {value!r}"
        ) from None
    if number < 0:
        raise InvalidArgumentError(f"storage option {key!r} must not be negative, got {value!r}")
    return number


def _same(a: object, b: object) -> bool:
    try:
        return bool(a == b)
    except Exception:  # values whose comparison fails are not the same
        return False


def _show(key: str, value: object) -> str:
    """``key=value`` for a message, with credentials hidden."""
    secret = any(word in key.lower() for word in ("secret", "token", "key", "password"))
    return f"{key}=<hidden>" if secret else f"{key}={value!r}"


def _unknown(key: str, known: Collection[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    # "region" is PyIceberg's "s3.region" more likely than s3fs's "cache_regions".
    prefixed = f"s3.{key.lower().replace('_', '-')}"
    if not key.startswith("s3.") and prefixed in S3_PROPERTIES:
        close = [prefixed]
    hint = f"; did you mean {close[0]!r}?" if close else ""
    if key.startswith("s3."):
        return (
            f"unknown storage option {key!r}{hint} (PyIceberg's S3 properties olympia "
            f"supports: {', '.join(known)})"
        )
    return (
        f"unknown storage option {key!r}: neither a PyIceberg s3.* property nor an "
        f"option of s3fs{hint}"
    )
