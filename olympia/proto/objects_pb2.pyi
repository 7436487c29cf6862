from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class CatalogDefinition(_message.Message):
    __slots__ = ("namespace_name_max_size", "table_name_max_size", "view_name_max_size", "node_order", "inline_value_max_bytes", "node_compression", "default_isolation", "distributed_txn_ttl_millis", "properties", "format_version", "commit_time_limit_millis", "expire_max_age_millis", "expire_min_versions")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAMESPACE_NAME_MAX_SIZE_FIELD_NUMBER: _ClassVar[int]
    TABLE_NAME_MAX_SIZE_FIELD_NUMBER: _ClassVar[int]
    VIEW_NAME_MAX_SIZE_FIELD_NUMBER: _ClassVar[int]
    NODE_ORDER_FIELD_NUMBER: _ClassVar[int]
    INLINE_VALUE_MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    NODE_COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_ISOLATION_FIELD_NUMBER: _ClassVar[int]
    DISTRIBUTED_TXN_TTL_MILLIS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TIME_LIMIT_MILLIS_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_MAX_AGE_MILLIS_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_MIN_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    namespace_name_max_size: int
    table_name_max_size: int
    view_name_max_size: int
    node_order: int
    inline_value_max_bytes: int
    node_compression: str
    default_isolation: str
    distributed_txn_ttl_millis: int
    properties: _containers.ScalarMap[str, str]
    format_version: int
    commit_time_limit_millis: int
    expire_max_age_millis: int
    expire_min_versions: int
    def __init__(self, namespace_name_max_size: _Optional[int] = ..., table_name_max_size: _Optional[int] = ..., view_name_max_size: _Optional[int] = ..., node_order: _Optional[int] = ..., inline_value_max_bytes: _Optional[int] = ..., node_compression: _Optional[str] = ..., default_isolation: _Optional[str] = ..., distributed_txn_ttl_millis: _Optional[int] = ..., properties: _Optional[_Mapping[str, str]] = ..., format_version: _Optional[int] = ..., commit_time_limit_millis: _Optional[int] = ..., expire_max_age_millis: _Optional[int] = ..., expire_min_versions: _Optional[int] = ...) -> None: ...

class Namespace(_message.Message):
    __slots__ = ("name", "properties")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    name: str
    properties: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., properties: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Table(_message.Message):
    __slots__ = ("namespace", "name", "format", "metadata_location", "properties")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    METADATA_LOCATION_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    format: str
    metadata_location: str
    properties: _containers.ScalarMap[str, str]
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ..., format: _Optional[str] = ..., metadata_location: _Optional[str] = ..., properties: _Optional[_Mapping[str, str]] = ...) -> None: ...

class View(_message.Message):
    __slots__ = ("namespace", "name", "sql_text", "dialect", "substrait_plan", "schema_json", "properties", "metadata_location")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SQL_TEXT_FIELD_NUMBER: _ClassVar[int]
    DIALECT_FIELD_NUMBER: _ClassVar[int]
    SUBSTRAIT_PLAN_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    METADATA_LOCATION_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    sql_text: str
    dialect: str
    substrait_plan: bytes
    schema_json: str
    properties: _containers.ScalarMap[str, str]
    metadata_location: str
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ..., sql_text: _Optional[str] = ..., dialect: _Optional[str] = ..., substrait_plan: _Optional[bytes] = ..., schema_json: _Optional[str] = ..., properties: _Optional[_Mapping[str, str]] = ..., metadata_location: _Optional[str] = ...) -> None: ...

class DistributedTransaction(_message.Message):
    __slots__ = ("id", "isolation", "begin_version", "created_at_millis", "expires_at_millis", "state_location", "step", "properties")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_FIELD_NUMBER: _ClassVar[int]
    BEGIN_VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MILLIS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MILLIS_FIELD_NUMBER: _ClassVar[int]
    STATE_LOCATION_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    id: str
    isolation: str
    begin_version: int
    created_at_millis: int
    expires_at_millis: int
    state_location: str
    step: int
    properties: _containers.ScalarMap[str, str]
    def __init__(self, id: _Optional[str] = ..., isolation: _Optional[str] = ..., begin_version: _Optional[int] = ..., created_at_millis: _Optional[int] = ..., expires_at_millis: _Optional[int] = ..., state_location: _Optional[str] = ..., step: _Optional[int] = ..., properties: _Optional[_Mapping[str, str]] = ...) -> None: ...
