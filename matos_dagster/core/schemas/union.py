"""One Arrow type for the records of several writer schemas, and their values placed in it.

Every record is decoded with the schema its writer used, so it keeps every field that writer set
and gains none. The records of one object share one type: the union, by field name, of their
writers' types (`joined`), the newest writer's first (its field order leads, fields only older
writers have follow), every field nullable that some writer lacks, numbers widened as Arrow's
permissive promotion widens them (int32 to int64, float32 to float64, int to double). A field
whose type changed otherwise (a string that became a long) has no such union: `Conflict`, and
the object is cut there (typed.py). Readers of several objects use the same union
(records/unify.py), so a record's typed value is the same in whichever object it lands.

`conform` casts a writer's array to the union (added fields null, narrower numbers widened);
`placed` puts arrays of some rows of a column at their rows, null elsewhere. No Dagster imports.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from matos_dagster.core.records import arrays as arrow_arrays
from matos_dagster.core.records.unify import unify


class Conflict(ValueError):
    """Writer types with no union (a field whose type changed other than by widening)."""


def joined(types: Sequence[pa.DataType]) -> pa.DataType:
    """The union of these types, oldest first (the last one's field order and names lead)."""
    if len(types) == 1 or all(t == types[0] for t in types[1:]):
        return types[-1]
    schemas = [pa.schema([pa.field("d", t)]) for t in types]
    try:
        pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid) as e:  # its last words say which field, and the two types
        raise Conflict(str(e).rpartition("Unable to merge: ")[2]) from None
    return unify(schemas).field("d").type


def conform(array: pa.Array, to: pa.DataType) -> pa.Array:
    """`array` as type `to`, a union it is part of (structs matched by field name). A field `to`
    adds is null, its own fields holding placeholders under it (as `pa.array` builds a null
    struct: Parquet wants values in a non-nullable field, and a cast leaves nulls there)."""
    if array.type == to:
        return array
    nulls = array.is_null() if array.null_count else None
    if pa.types.is_struct(to) and pa.types.is_struct(array.type):
        children = []
        for f in to:
            i = array.type.get_field_index(f.name)
            children.append(conform(array.field(i), f.type) if i >= 0 else pa.array([None] * len(array), f.type))
        return pa.StructArray.from_arrays(children, fields=list(to), mask=nulls)
    if array.offset and (pa.types.is_list(to) or pa.types.is_map(to)):
        array = pa.concat_arrays([array])  # from_arrays takes no mask with a slice's offsets
    if pa.types.is_list(to) and pa.types.is_list(array.type) and array.type.value_type != to.value_type:
        return pa.ListArray.from_arrays(array.offsets, conform(array.values, to.value_type), type=to, mask=nulls)
    if pa.types.is_map(to) and pa.types.is_map(array.type) and array.type.item_type != to.item_type:
        return pa.MapArray.from_arrays(array.offsets, conform(array.keys, to.key_type),
                                       conform(array.items, to.item_type), type=to, mask=nulls)
    try:
        return array.cast(to)
    except pa.ArrowInvalid:
        # Read back from Parquet, a struct may hold nulls in a non-nullable field under a null
        # parent, which Arrow's cast refuses: the values, built again as pa.array builds them.
        return pa.array(array.to_pylist(), to)


def placed(parts: Sequence[tuple[np.ndarray, pa.Array]], n: int, to: pa.DataType) -> pa.Array:
    """An array of `n` rows of type `to`: each part's values (conformed) at its rows (ascending
    row numbers), null at rows no part has. A null struct holds a placeholder row (one of the
    values) in its fields, not nulls: Parquet needs values in a non-nullable field."""
    parts = [(rows, conform(a, to)) for rows, a in parts if len(rows)]
    if len(parts) == 1 and len(parts[0][0]) == n:
        return parts[0][1]
    if not parts:
        return pa.array([None] * n, to)  # pa.array fills a struct's non-nullable fields with placeholders
    values = parts[0][1] if len(parts) == 1 else pa.concat_arrays([a for _, a in parts])
    where = np.zeros(n, np.int64)
    valid = np.zeros(n, bool)
    at = 0
    for rows, a in parts:
        where[rows] = np.arange(at, at + len(rows))
        valid[rows] = True
        at += len(rows)
    if valid.all():
        return values.take(arrow_arrays.indices(where))
    if pa.types.is_struct(to):
        taken = values.take(arrow_arrays.indices(where))  # rows without a value take value 0's
        return pa.StructArray.from_arrays([taken.field(i) for i in range(to.num_fields)], fields=list(to),
                                          mask=arrow_arrays.booleans(~valid))
    return values.take(arrow_arrays.indices(where, valid))


def pruned(t: pa.DataType | None) -> pa.DataType | None:
    """`t` without the parts only nulls typed (a field null or [] in every record so far): None if
    nothing is left. Arrow's null type has no Parquet or Iceberg type; a later record that gives
    such a field a value adds it then."""
    if t is None or pa.types.is_null(t):
        return None
    if pa.types.is_struct(t):
        fields = [f.with_type(ft) for f in t if (ft := pruned(f.type)) is not None]
        return pa.struct(fields) if fields else None
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = pruned(t.value_type)
        if item is None:
            return None
        field = t.value_field.with_type(item)
        return pa.list_(field) if pa.types.is_list(t) else pa.large_list(field)
    if pa.types.is_map(t):
        item = pruned(t.item_type)
        return None if item is None else pa.map_(t.key_field, t.item_field.with_type(item))
    return t
