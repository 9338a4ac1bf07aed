"""The schema of a Spark DataFrame of typed archive rows, from their Arrow schema.

A frame of raw rows has a fixed schema (reader.SPARK_DDL); a typed topic's adds its typed
columns, whose types are known only from the objects read (records/unify.py). `frame_types`
gives both sides of `mapInArrow`: the Spark schema (every field nullable, as a DDL string
makes them) and the Arrow schema the tasks cast their batches to. The raw columns keep their
fixed Arrow types; typed ones take Spark's, after the types Spark has no match for are
widened: unsigned integers to the next signed one (uint64 to decimal(20, 0)), time32 to
time64, a decimal past Spark's 38 digits to its string. No Dagster imports.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa


def frame_types(raw: pa.Schema, typed: list[pa.Field]) -> tuple[Any, pa.Schema]:
    """(Spark StructType, Arrow schema of the tasks' batches) of `raw`'s columns then `typed`'s."""
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
    from pyspark.sql.types import StructType

    spark_typed = [pa.field(f.name, _sparkable(f.type), nullable=True) for f in typed]
    struct = _nullable(from_arrow_schema(pa.schema([*raw, *spark_typed])))
    arrow_typed = to_arrow_schema(StructType(struct.fields[len(raw):]), timezone="UTC")
    return struct, pa.schema([*raw, *arrow_typed])


def _sparkable(t: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _sparkable(f.type), f.nullable) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(pa.field(t.value_field.name, _sparkable(t.value_type), t.value_field.nullable))
    if pa.types.is_map(t):
        return pa.map_(_sparkable(t.key_type), pa.field(t.item_field.name, _sparkable(t.item_type),
                                                        t.item_field.nullable))
    if pa.types.is_unsigned_integer(t):
        return {8: pa.int16(), 16: pa.int32(), 32: pa.int64()}.get(t.bit_width, pa.decimal128(20, 0))
    if pa.types.is_time32(t):
        return pa.time64("us")
    if pa.types.is_decimal(t) and t.precision > 38:
        return pa.string()
    return t


def _nullable(t: Any) -> Any:
    """The Spark type with every field, array element and map value nullable."""
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    if isinstance(t, StructType):
        return StructType([StructField(f.name, _nullable(f.dataType), True, f.metadata) for f in t.fields])
    if isinstance(t, ArrayType):
        return ArrayType(_nullable(t.elementType), True)
    if isinstance(t, MapType):
        return MapType(_nullable(t.keyType), _nullable(t.valueType), True)
    return t
