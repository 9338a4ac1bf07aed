"""The archive materialisation's metadata: typed so that Dagster's plots mean something (issue 21.4).

Dagster 1.13 plots int and float entries only, one point per partition key (or per
materialisation time); see `assets.archive.metadata`. Pure: an `Archived` made by hand.
"""

from dagster import MetadataValue

from matos_dagster.assets.archive import metadata
from matos_dagster.core.archive.range_run import Archived
from matos_dagster.core.offsets.ranges import OffsetRange

R = OffsetRange("demo", 3, 1000, 1600)
DOC = {"records": 598, "bytes": 51234, "record_bytes": 612352, "objects": [{"name": "a"}, {"name": "b"}],
       "first_offset": 1000, "last_offset": 1599, "min_timestamp": 1_795_000_000_000, "max_timestamp": 1_795_000_060_500}


def archived(**kw) -> Archived:
    return Archived(**{"range": R, "manifest_name": "x/_manifest.json", "manifest": DOC, "verified_only": False,
                       "committed_before": 1000, "committed_after": 1600, "duration_s": 2.0, "slices": 2,
                       "log_end": 1750, **kw})


def test_a_range_archived_has_plottable_offsets_counts_lag_and_delay_and_its_times_as_timestamps():
    meta = metadata(archived(), "http://swift/c/x/", now=1_795_000_100.0)
    ints = {k: v.value for k, v in meta.items() if isinstance(v, type(MetadataValue.int(0)))}
    assert ints == {"records": 598, "records_written": 598, "bytes": 51234, "record_bytes": 612352, "objects": 2,
                    "start": 1000, "end": 1600, "slices": 2, "committed_offset": 1600, "lag_behind_log_end": 150,
                    "first_offset": 1000, "last_offset": 1599}
    assert meta["records_per_s"] == MetadataValue.float(299.0)
    assert meta["seconds_after_newest_record"] == MetadataValue.float(39.5)  # 100 s - 60.5 s
    assert meta["first_timestamp"] == MetadataValue.timestamp(1_795_000_000.0)
    assert meta["last_timestamp"] == MetadataValue.timestamp(1_795_000_060.5)
    assert meta["archived_at"] == MetadataValue.timestamp(1_795_000_100.0)
    assert meta["already_archived"] == MetadataValue.bool(False)


def test_a_run_that_only_verified_plots_no_records_written_and_no_delay():
    meta = metadata(archived(verified_only=True, already_archived=True, slices=0), "u", now=1_795_000_100.0)
    assert meta["already_archived"] == MetadataValue.bool(True)
    assert meta["records"] == MetadataValue.int(598)  # the range's records, as in its manifest
    assert meta["records_written"] == MetadataValue.int(0) and meta["records_per_s"] == MetadataValue.float(0.0)
    assert "seconds_after_newest_record" not in meta  # it would only say when someone reran the range
