from olympia.proto import objects_pb2 as _objects_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ActionType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTION_TYPE_UNSPECIFIED: _ClassVar[ActionType]
    NAMESPACE_CREATE: _ClassVar[ActionType]
    NAMESPACE_EXISTS: _ClassVar[ActionType]
    NAMESPACE_DESCRIBE: _ClassVar[ActionType]
    NAMESPACE_ALTER: _ClassVar[ActionType]
    NAMESPACE_DROP: _ClassVar[ActionType]
    NAMESPACES_LIST: _ClassVar[ActionType]
    TABLE_CREATE: _ClassVar[ActionType]
    TABLE_EXISTS: _ClassVar[ActionType]
    TABLE_DESCRIBE: _ClassVar[ActionType]
    TABLE_UPDATE: _ClassVar[ActionType]
    TABLE_DROP: _ClassVar[ActionType]
    TABLES_LIST: _ClassVar[ActionType]
    TABLE_RENAME: _ClassVar[ActionType]
    TABLE_SELECT: _ClassVar[ActionType]
    TABLE_INSERT: _ClassVar[ActionType]
    TABLE_OVERWRITE: _ClassVar[ActionType]
    VIEW_CREATE: _ClassVar[ActionType]
    VIEW_EXISTS: _ClassVar[ActionType]
    VIEW_DESCRIBE: _ClassVar[ActionType]
    VIEW_REPLACE: _ClassVar[ActionType]
    VIEW_DROP: _ClassVar[ActionType]
    VIEWS_LIST: _ClassVar[ActionType]
    TRANSACTION_CREATE: _ClassVar[ActionType]
    TRANSACTION_UPDATE: _ClassVar[ActionType]
    TRANSACTION_DROP: _ClassVar[ActionType]
    TRANSACTION_EXISTS: _ClassVar[ActionType]
    CATALOG_ROLLBACK: _ClassVar[ActionType]

class TransactionOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSACTION_OUTCOME_OPEN: _ClassVar[TransactionOutcome]
    TRANSACTION_OUTCOME_COMMITTING: _ClassVar[TransactionOutcome]
    TRANSACTION_OUTCOME_ROLLED_BACK: _ClassVar[TransactionOutcome]
ACTION_TYPE_UNSPECIFIED: ActionType
NAMESPACE_CREATE: ActionType
NAMESPACE_EXISTS: ActionType
NAMESPACE_DESCRIBE: ActionType
NAMESPACE_ALTER: ActionType
NAMESPACE_DROP: ActionType
NAMESPACES_LIST: ActionType
TABLE_CREATE: ActionType
TABLE_EXISTS: ActionType
TABLE_DESCRIBE: ActionType
TABLE_UPDATE: ActionType
TABLE_DROP: ActionType
TABLES_LIST: ActionType
TABLE_RENAME: ActionType
TABLE_SELECT: ActionType
TABLE_INSERT: ActionType
TABLE_OVERWRITE: ActionType
VIEW_CREATE: ActionType
VIEW_EXISTS: ActionType
VIEW_DESCRIBE: ActionType
VIEW_REPLACE: ActionType
VIEW_DROP: ActionType
VIEWS_LIST: ActionType
TRANSACTION_CREATE: ActionType
TRANSACTION_UPDATE: ActionType
TRANSACTION_DROP: ActionType
TRANSACTION_EXISTS: ActionType
CATALOG_ROLLBACK: ActionType
TRANSACTION_OUTCOME_OPEN: TransactionOutcome
TRANSACTION_OUTCOME_COMMITTING: TransactionOutcome
TRANSACTION_OUTCOME_ROLLED_BACK: TransactionOutcome

class Action(_message.Message):
    __slots__ = ("type", "object_key", "namespace", "table", "view", "transaction", "set_properties", "unset_properties", "target_key", "read_only", "found", "update_fields", "claim")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    OBJECT_KEY_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    SET_PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    UNSET_PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    TARGET_KEY_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    UPDATE_FIELDS_FIELD_NUMBER: _ClassVar[int]
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    type: ActionType
    object_key: str
    namespace: _objects_pb2.Namespace
    table: _objects_pb2.Table
    view: _objects_pb2.View
    transaction: _objects_pb2.DistributedTransaction
    set_properties: _containers.RepeatedScalarFieldContainer[str]
    unset_properties: _containers.RepeatedScalarFieldContainer[str]
    target_key: str
    read_only: bool
    found: bool
    update_fields: _containers.RepeatedScalarFieldContainer[str]
    claim: str
    def __init__(self, type: _Optional[_Union[ActionType, str]] = ..., object_key: _Optional[str] = ..., namespace: _Optional[_Union[_objects_pb2.Namespace, _Mapping]] = ..., table: _Optional[_Union[_objects_pb2.Table, _Mapping]] = ..., view: _Optional[_Union[_objects_pb2.View, _Mapping]] = ..., transaction: _Optional[_Union[_objects_pb2.DistributedTransaction, _Mapping]] = ..., set_properties: _Optional[_Iterable[str]] = ..., unset_properties: _Optional[_Iterable[str]] = ..., target_key: _Optional[str] = ..., read_only: _Optional[bool] = ..., found: _Optional[bool] = ..., update_fields: _Optional[_Iterable[str]] = ..., claim: _Optional[str] = ...) -> None: ...

class TransactionState(_message.Message):
    __slots__ = ("transaction", "actions", "outcome", "nonce", "written_at_millis", "commit_info")
    TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_AT_MILLIS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INFO_FIELD_NUMBER: _ClassVar[int]
    transaction: _objects_pb2.DistributedTransaction
    actions: _containers.RepeatedCompositeFieldContainer[Action]
    outcome: TransactionOutcome
    nonce: str
    written_at_millis: int
    commit_info: CommitInfo
    def __init__(self, transaction: _Optional[_Union[_objects_pb2.DistributedTransaction, _Mapping]] = ..., actions: _Optional[_Iterable[_Union[Action, _Mapping]]] = ..., outcome: _Optional[_Union[TransactionOutcome, str]] = ..., nonce: _Optional[str] = ..., written_at_millis: _Optional[int] = ..., commit_info: _Optional[_Union[CommitInfo, _Mapping]] = ...) -> None: ...

class CommitInfo(_message.Message):
    __slots__ = ("transaction_id", "message", "author", "properties")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    message: str
    author: str
    properties: _containers.ScalarMap[str, str]
    def __init__(self, transaction_id: _Optional[str] = ..., message: _Optional[str] = ..., author: _Optional[str] = ..., properties: _Optional[_Mapping[str, str]] = ...) -> None: ...

class VersionCommitInfo(_message.Message):
    __slots__ = ("transactions",)
    TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    transactions: _containers.RepeatedCompositeFieldContainer[CommitInfo]
    def __init__(self, transactions: _Optional[_Iterable[_Union[CommitInfo, _Mapping]]] = ...) -> None: ...
