"""The load job (Matos' `load`) produces exactly the records its config describes."""

from __future__ import annotations

from dagster import DagsterInstance
from helpers import read_kafka

from matos_dagster.jobs.load import load


def run_load(kafka, **config):
    with DagsterInstance.ephemeral() as instance:
        result = load.execute_in_process(run_config={"ops": {"produce": {"config": config}}},
                                         resources={"kafka": kafka}, instance=instance, raise_on_error=False)
    return result


def test_records_go_to_the_partitions_in_turn_with_their_keys_headers_and_sizes(kafka, new_topic):
    topic = new_topic(partitions=3)
    result = run_load(kafka, topic=topic, count=3000, value_bytes=64, key_pattern="k{i}-p{p}",
                      headers={"source": "test"}, partitions=[0, 2])
    assert result.success
    p0, p1, p2 = (read_kafka(kafka, topic, p) for p in range(3))
    assert (len(p0), len(p1), len(p2)) == (1500, 0, 1500)
    assert [r["key"] for r in p0[:2]] == [b"k0-p0", b"k2-p0"] and p2[0]["key"] == b"k1-p2"
    assert all(len(r["value"]) == 64 and r["headers"] == [{"key": "source", "value": b"test"}] for r in p0 + p2)
    assert result.output_for_node("produce") == 3000
    out = [e for e in result.events_for_node("produce") if e.is_successful_output][0]
    md = out.step_output_data.metadata
    assert md["log_end_p0"].value == 1500 and md["log_end_p2"].value == 1500 and "log_end_p1" not in md


def test_a_transactional_load_is_read_committed_whole(kafka, new_topic):
    topic = new_topic()
    result = run_load(kafka, topic=topic, count=2500, value_bytes=10, key_pattern="", transactional=True,
                      transaction_size=1000)
    assert result.success
    rows = read_kafka(kafka, topic, 0)  # read_committed
    assert len(rows) == 2500 and all(r["key"] is None for r in rows)


def test_an_unknown_partition_is_refused_before_producing(kafka, new_topic):
    topic = new_topic(partitions=2)
    result = run_load(kafka, topic=topic, count=10, partitions=[5])
    assert not result.success
    error = result.failure_data_for_node("produce").error.cause  # the op's own exception
    assert error.cls_name == "ValueError" and "has no partition(s) [5]; it has [0, 1]" in error.message
    assert kafka.watermarks(topic, [0, 1]) == {0: (0, 0), 1: (0, 0)}
