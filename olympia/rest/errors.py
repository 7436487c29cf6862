"""Errors of the REST server: every failure becomes an Iceberg ``ErrorModel``
response with the status code the REST specification gives it (spec/rest.md §4).

The catalog below raises PyIceberg's exceptions (and olympia's, which the
Iceberg layer may let through); :func:`classify` maps both to one
:class:`RestError`, in one place, so that no route decides status codes.
"""

from __future__ import annotations

import json
import re

from pyiceberg import exceptions as ice

from olympia import errors as oly
from olympia.iceberg.names import InvalidNamespaceError
from olympia.iceberg.views import InvalidViewError, ViewRequirementFailed


class RestError(Exception):
    """A failure with its HTTP status, the ErrorModel ``type`` and a message."""

    def __init__(self, code: int, type: str, message: str) -> None:
        super().__init__(code, type, message)
        self.code = code
        self.type = type
        self.message = message

    def __str__(self) -> str:
        return f"{self.code} {self.type}: {self.message}"

    def body(self, *, flat: bool = False) -> bytes:
        """The JSON ``IcebergErrorResponse`` of this error.

        ``flat``: also repeat ``message``, ``type`` and ``code`` at the top
        level, for the responses whose schema the specification gives as a
        bare ``ErrorModel`` (see :func:`flat_error_body`); clients read the
        ``error`` object, which is there either way.
        """
        error = {"message": self.message, "type": self.type, "code": self.code}
        payload: dict[str, object] = {"error": error, **error} if flat else {"error": error}
        return json.dumps(payload).encode()


def bad_request(message: str) -> RestError:
    return RestError(400, "BadRequestException", message)


def not_found(kind: str, message: str) -> RestError:
    """``kind`` is ``Namespace``, ``Table`` or ``View``."""
    return RestError(404, f"NoSuch{kind}Exception", message)


# Responses whose schema in the specification is a bare ``ErrorModel`` rather
# than the ``IcebergErrorResponse`` wrapper every other error uses (and that
# every client parses): (method, route below /v1/{prefix}, status). Their
# bodies carry both shapes (``ErrorModel`` allows further properties).
_FLAT_ERRORS = frozenset(
    {
        ("POST", "/namespaces", 406),
        ("POST", "/namespaces/{namespace}/properties", 406),
        ("POST", "/namespaces/{namespace}/tables/{table}/plan", 406),
        ("POST", "/tables/rename", 406),
        ("GET", "/namespaces/{namespace}/views", 404),
        ("POST", "/namespaces/{namespace}/views", 404),
        ("POST", "/namespaces/{namespace}/views", 409),
        ("GET", "/namespaces/{namespace}/views/{view}", 404),
        ("POST", "/namespaces/{namespace}/views/{view}", 404),
        ("POST", "/namespaces/{namespace}/views/{view}", 409),
        ("POST", "/namespaces/{namespace}/views/{view}", 500),
        ("POST", "/namespaces/{namespace}/views/{view}", 502),
        ("POST", "/namespaces/{namespace}/views/{view}", 504),
        ("DELETE", "/namespaces/{namespace}/views/{view}", 404),
        ("POST", "/views/rename", 404),
        ("POST", "/views/rename", 406),
        ("POST", "/views/rename", 409),
    }
)


def flat_error_body(method: str, route: str, code: int) -> bool:
    """Whether the error ``code`` of ``method route`` (``route`` below
    ``/v1/{prefix}``, with its ``{parameters}``) is a bare ``ErrorModel`` in
    the specification."""
    if (method, route, code) in _FLAT_ERRORS:
        return True
    return code >= 500 and (method, route, 500) in _FLAT_ERRORS


UNAUTHORIZED = RestError(401, "NotAuthorizedException", "missing or wrong bearer token")

# Status, type name, in the order they are tried: subclasses before their bases.
_TABLE: tuple[tuple[type[BaseException], int, str], ...] = (
    # a name that cannot be a namespace: bad input, though also a NoSuchNamespaceError
    (InvalidNamespaceError, 400, "BadRequestException"),
    # a location outside what the operator allows (spec/rest.md §10)
    (ice.ForbiddenError, 403, "ForbiddenException"),
    (ice.NoSuchNamespaceError, 404, "NoSuchNamespaceException"),
    (oly.NamespaceNotFoundError, 404, "NoSuchNamespaceException"),
    (ice.NoSuchTableError, 404, "NoSuchTableException"),
    (oly.TableNotFoundError, 404, "NoSuchTableException"),
    (ice.NoSuchViewError, 404, "NoSuchViewException"),
    (oly.ViewNotFoundError, 404, "NoSuchViewException"),
    (ice.NoSuchIdentifierError, 404, "NoSuchTableException"),
    (ice.NamespaceAlreadyExistsError, 409, "AlreadyExistsException"),
    (ice.TableAlreadyExistsError, 409, "AlreadyExistsException"),
    (ice.ViewAlreadyExistsError, 409, "AlreadyExistsException"),
    (oly.ObjectAlreadyExistsError, 409, "AlreadyExistsException"),
    (ice.NamespaceNotEmptyError, 409, "NamespaceNotEmptyException"),
    (oly.NamespaceNotEmptyError, 409, "NamespaceNotEmptyException"),
    (ice.CommitStateUnknownException, 500, "CommitStateUnknownException"),
    # nothing was published (spec/transactions.md §8.5): the client may retry
    (oly.CommitTimeoutError, 409, "CommitFailedException"),
    (oly.CommitFailedError, 500, "CommitStateUnknownException"),
    (ice.CommitFailedException, 409, "CommitFailedException"),
    (oly.CommitConflictError, 409, "CommitFailedException"),
    (oly.TransactionClosedError, 409, "CommitFailedException"),
    (oly.TransactionExpiredError, 409, "CommitFailedException"),
    (ViewRequirementFailed, 409, "CommitFailedException"),
    # Iceberg's Java client raises this type as IllegalArgumentException
    (InvalidViewError, 400, "IllegalArgumentException"),
    (ice.ValidationError, 400, "BadRequestException"),
    (ice.ValidationException, 400, "BadRequestException"),
    (ice.BadRequestError, 400, "BadRequestException"),
    (oly.InvalidArgumentError, 400, "BadRequestException"),
    (ValueError, 400, "BadRequestException"),
    (TypeError, 400, "BadRequestException"),
    (NotImplementedError, 406, "UnsupportedOperationException"),
)


#: PyIceberg's wording of a failed requirement, and Iceberg's REST reference
#: server's, which Iceberg's Java client and the people reading Spark's
#: errors expect (spec/rest.md §4).
_REQUIREMENT_WORDING = (
    (
        r"current schema id has changed: expected (\S+), found (\S+)",
        r"current schema changed: expected id \1 != \2",
    ),
    (
        r"last assigned field id has changed: expected (\S+), found (\S+)",
        r"last assigned field id changed: expected id \1 != \2",
    ),
    (
        r"last assigned partition id has changed: expected (\S+), found (\S+)",
        r"last assigned partition id changed: expected id \1 != \2",
    ),
    (
        r"default spec id has changed: expected (\S+), found (\S+)",
        r"default partition spec changed: expected id \1 != \2",
    ),
    (
        r"default sort order id has changed: expected (\S+), found (\S+)",
        r"default sort order changed: expected id \1 != \2",
    ),
    (
        r"(?<!Requirement failed: )Table UUID does not match: (\S+) != (\S+)",
        r"Requirement failed: UUID does not match: expected \1 != \2",
    ),
    (r"^Table already exists$", "Requirement failed: table already exists"),
)


def requirement_wording(message: str) -> str:
    """``message`` with every failed requirement in Iceberg's words."""
    for pattern, wording in _REQUIREMENT_WORDING:
        message = re.sub(pattern, wording, message)
    return message


def classify(exc: BaseException, *, commit: bool = False) -> RestError:
    """The REST error for ``exc``.

    ``commit`` marks a request that may have changed the catalog: an
    exception that is not a definite outcome (storage failed, a bug) then
    answers 500 ``CommitStateUnknownException``, so that a client neither
    retries blindly nor cleans up files a landed commit references.
    """
    if isinstance(exc, RestError):
        return exc
    for kind, code, name in _TABLE:
        if isinstance(exc, kind):
            message = str(exc) or name
            if name == "CommitFailedException":
                message = requirement_wording(message)
            return RestError(code, name, message)
    if commit:
        return RestError(
            500,
            "CommitStateUnknownException",
            f"the commit's outcome is unknown ({type(exc).__name__}: {exc}); reload the table",
        )
    if isinstance(exc, oly.StorageError):
        return RestError(503, "ServiceUnavailableException", f"storage failed: {exc}")
    return RestError(500, "InternalServerError", f"{type(exc).__name__}: {exc}")
