"""The verifier: its pure parts by tables, then each kind of damage induced on a real archive.

Every induced problem must be reported precisely (kind, partition, offsets, object name)
and nothing else with it: a verifier that cries wolf is as useless as one that never does.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid

import pyarrow as pa
import pytest
from helpers import delete_records, produce, read_kafka
from samples import awkward_rows, delete_topic

from matos_dagster.core.archive import loss
from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.records.objects import decode, encode
from matos_dagster.core.records.schema import SCHEMA
from matos_dagster.core.settings import PROJECT_ROOT
from matos_dagster.core.swift import layout
from matos_dagster.core.topics import TopicConfig
from matos_dagster.core.verify import (
    ACKNOWLEDGED,
    DIFFERS,
    EVERYTHING,
    FROM_MARK,
    GAP,
    LOSS,
    MANIFEST,
    MD5,
    MISSING,
    OFFSETS,
    OVERLAP,
    SIZE,
    UNCOMPARED,
    UNCOVERED,
    Problem,
    Report,
    check_coverage,
    differences,
    manifest_issues,
    mark_name,
    object_issues,
    sample_positions,
    sound_end,
    verify_topic,
)
from matos_dagster.jobs.verify import verify_job

# -- pure parts ---------------------------------------------------------------------------


def _kinds(found: list[Problem]) -> list[tuple[str, int, int]]:
    return [(p.kind, p.start, p.end) for p in found]


@pytest.mark.parametrize("spans, low, high, committed, problems, loss", [
    # all well: contiguous, committed at the end, or behind it (a run died before committing)
    ([(0, 10), (10, 20)], 0, 30, 20, [], []),
    ([(0, 10), (10, 20)], 0, 30, 10, [], []),
    ([(0, 10), (10, 20)], 0, 30, None, [], []),
    ([], 0, 30, None, [], []),
    ([], 5, 30, None, [], []),                    # nothing promised, nothing lost
    ([(0, 10)], 5, 30, 10, [], []),               # expired after it was archived
    ([(10, 20)], 0, 30, 0, [], []),               # committed moved back below the archive: pending
    # gaps, committed offsets in no manifest, overlaps
    ([(0, 10), (20, 30)], 0, 30, 30, [(GAP, 10, 20)], []),
    ([(0, 10), (20, 30)], 0, 30, 10, [(GAP, 10, 20)], []),  # an out-of-order range, not committed yet
    ([(0, 10)], 0, 30, 25, [(UNCOVERED, 10, 25)], []),
    ([], 0, 30, 12, [], []),                       # committed, nothing archived, nothing promised below it
    ([(0, 10), (5, 15)], 0, 30, 15, [(OVERLAP, 5, 10)], []),
    ([(0, 10), (5, 15), (10, 20)], 0, 30, 20, [(OVERLAP, 5, 10), (OVERLAP, 10, 15)], []),
    ([(0, 30), (10, 20)], 0, 30, 30, [(OVERLAP, 10, 20)], []),
    ([(0, 10)], 0, 5, 5, [("beyond-end", 5, 10)], []),
    # loss: holes below the log start offset
    ([(0, 20)], 60, 100, 20, [], [(LOSS, 20, 60)]),
    ([(0, 20), (60, 100)], 60, 100, 100, [], [(LOSS, 20, 60)]),
    ([(0, 20), (60, 100)], 40, 100, 100, [(GAP, 40, 60)], [(LOSS, 20, 40)]),
    ([(0, 10)], 50, 100, 70, [(UNCOVERED, 50, 70)], [(LOSS, 10, 50)]),
    ([], 50, 100, 20, [], [(LOSS, 20, 50)]),
])
def test_coverage_table(spans, low, high, committed, problems, loss):
    found, lost = check_coverage("t", "g", 0, spans, low, high, committed)
    assert _kinds(found) == problems
    assert _kinds(lost) == loss


@pytest.mark.parametrize("ranges, acknowledged, low, committed, start, problems, loss", [
    # an acknowledged loss is an entry: no gap, no loss, the run goes on past it
    ([(0, 20), (60, 100)], [(20, 60)], 60, 100, None, [], []),
    ([(0, 20)], [(20, 60)], 60, 60, None, [], []),
    ([(0, 20)], [(20, 40)], 60, 60, None, [], [(LOSS, 40, 60)]),       # only part of the loss acknowledged
    ([(0, 20), (10, 30)], [], 0, 30, None, [(OVERLAP, 10, 20)], []),
    ([(0, 20)], [(10, 30)], 30, 30, None, [(OVERLAP, 10, 20)], []),    # a loss record over archived offsets
    # from an audit mark: only offsets from `start` on are judged; the entry below is passed
    ([(0, 20), (20, 30)], [], 0, 30, 20, [], []),
    ([(0, 20), (25, 30)], [], 0, 30, 20, [(GAP, 20, 25)], []),         # a hole right at the mark is a gap
    ([(0, 20)], [], 0, 40, 20, [(UNCOVERED, 20, 40)], []),
    ([(0, 10), (30, 40)], [], 0, 40, 35, [], []),                       # [10, 30) is below the start
    ([(0, 20)], [], 50, 20, 20, [], [(LOSS, 20, 50)]),
])
def test_coverage_with_acknowledged_loss_and_a_start(ranges, acknowledged, low, committed, start, problems, loss):
    found, lost = check_coverage("t", "g", 0, ranges, low, 100, committed, acknowledged, start)
    assert _kinds(found) == problems
    assert _kinds(lost) == loss


@pytest.mark.parametrize("start, entries, bad, committed, mark", [
    (0, [(0, 10), (10, 20)], [], 20, 20),
    (0, [(0, 10), (10, 20)], [], 15, 15),            # not past the committed offset
    (0, [(0, 10), (10, 20)], [], None, None),        # nothing committed: no mark
    (0, [(0, 10), (20, 30)], [], 30, 10),            # not past a hole
    (0, [(0, 10), (10, 20)], [(12, 13)], 20, 12),    # not past a problem
    (10, [(0, 10), (10, 20)], [(5, 6)], 20, 5),      # a problem below the start pulls it back
    (0, [(0, 10)], [None], 10, None),                # a problem without offsets: the mark stays
])
def test_the_audit_mark_stops_at_the_first_hole_problem_or_uncommitted_offset(start, entries, bad, committed, mark):
    problems = [Problem(MD5, 0, "x", *(b or (None, None))) for b in bad]
    assert sound_end(start, entries, problems, committed) == mark


def test_coverage_messages_name_the_partition_offsets_and_group():
    (gap,), () = check_coverage("orders", "g1", 3, [(0, 10), (20, 30)], 0, 30, 30)
    assert gap.message == ("orders/3: offsets [10, 20) are in no manifest, between archived ranges "
                           "(below the committed offset 30)")
    (unc,), () = check_coverage("orders", "g1", 3, [(0, 10)], 0, 30, 25)
    assert "offsets [10, 25) are committed (group g1 at 25) but in no manifest: the archive ends at 10" in unc.message
    (), (lost,) = check_coverage("orders", "g1", 3, [(0, 20)], 60, 100, 20)
    assert lost.message == ("orders/3: offsets [20, 60) were deleted from Kafka (log start offset now 60) before "
                            "they were archived: up to 40 records lost; to go on, record the loss in the archive "
                            f"with the `acknowledge_loss` job: {loss.command('orders', 3)}")


def _doc(**kw):
    doc = {"topic": "t", "partition": 0, "start": 0, "end": 10, "format": "parquet", "records": 3,
           "objects": [{"name": "o", "records": 3, "bytes": 1, "md5": "x", "first_offset": 0, "last_offset": 2}]}
    doc.update(kw)
    return doc


@pytest.mark.parametrize("doc, expected, usable", [
    (_doc(), [], True),
    ([], ["is not a JSON object"], False),
    ({"topic": "t"}, ["lacks partition, start, end, format, records, objects"], False),
    (_doc(end=11), ["names t/0[0, 11), not the range of its folder t/0[0, 10)"], True),
    (_doc(format="csv"), ["has unknown format 'csv'"], False),
    (_doc(records=4), ["says 4 records, its objects 3"], True),
    (_doc(objects=[{"name": "o"}]),
     ["has an `objects` list whose entries lack name, records, bytes, md5 or offsets"], False),
])
def test_manifest_issues(doc, expected, usable):
    assert manifest_issues(doc, "t", 0, (0, 10)) == (expected, usable)


def _o(name, first, last):
    return {"name": name, "first_offset": first, "last_offset": last}


@pytest.mark.parametrize("objects, expected", [
    ([_o("a", 0, 4), _o("b", 5, 9)], []),
    ([_o("b", 5, 9), _o("a", 0, 4)], []),
    ([_o("a", 0, 10)], [("a", "holds offsets [0, 10], outside its range [0, 10)")]),
    ([_o("a", 4, 2)], [("a", "holds offsets [4, 2], outside its range [0, 10)")]),
    ([_o("a", 0, 5), _o("b", 5, 9)], [("b", "holds offsets [5, 9], overlapping [0, 5] of object a")]),
])
def test_object_issues(objects, expected):
    assert object_issues(objects, (0, 10)) == expected


@pytest.mark.parametrize("lo, hi, n, positions", [
    (0, 10, 0, []),
    (0, 0, 5, []),
    (0, 10, 1, [0]),
    (0, 10, 2, [0, 9]),
    (0, 10, 4, [0, 3, 6, 9]),
    (0, 3, 10, [0, 1, 2]),
    (100, 1100, 3, [100, 599, 1099]),
])
def test_sample_positions(lo, hi, n, positions):
    assert sample_positions(lo, hi, n) == positions


def test_differences_name_every_field_that_differs():
    row = {"topic": "t", "partition": 0, "offset": 1, "timestamp": 5, "timestamp_type": "CreateTime",
           "key": b"k", "value": None, "headers": [{"key": "h", "value": b"1"}]}
    assert differences(row, dict(row)) == []
    assert differences(row, {**row, "value": b""}) == ["value"]  # null is not empty
    assert differences(row, {**row, "headers": [], "timestamp": 6}) == ["timestamp", "headers"]


def test_a_report_is_ok_only_without_problems_and_loss_and_renders_both():
    r = Report("t", 0)
    assert r.ok and "verify t: OK" in r.render()
    r.loss.append(Problem(LOSS, 0, "t/0: offsets [0, 4) were deleted", 0, 4))
    assert not r.ok and r.lost_offsets == 4 and "DATA LOSS (4 offsets)" in r.render()
    r.problems.append(Problem(GAP, 1, "t/1: offsets [5, 6) are in no manifest", 5, 6))
    assert r.counts()[GAP] == 1 and r.counts()[LOSS] == 1 and r.counts()[MD5] == 0
    assert "[gap] t/1: offsets [5, 6) are in no manifest" in r.render()


USAGE_ERRORS = [
    ([], "the following arguments are required: --topic"),
    (["--topic", "demo", "--sample", "3", "--full"], "not allowed with argument"),
    (["--topic", "demo", "--sample", "-1"], "--sample must be >= 0"),
    (["--topic", "no-such-topic"], "is not in the topics file"),
    (["--topic", "demo", "--audit-all", "--from-offset", "3"], "not allowed with argument"),
    (["--topic", "demo", "--from-offset", "-1"], "--from-offset must be an offset >= 0"),
]


@pytest.fixture(scope="module")
def usage_runs() -> dict[tuple[str, ...], subprocess.CompletedProcess]:
    """`audit` with each case's arguments, each in a process of its own, all started at once (the
    2-core machine runs two interpreters' start-up at a time instead of one)."""
    env = {**os.environ, "MATOS_TOPICS_FILE": str(PROJECT_ROOT / "topics.yaml")}
    procs = {tuple(args): subprocess.Popen([sys.executable, "-m", "matos_dagster", "audit", *args], env=env,
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for args, _ in USAGE_ERRORS}
    done = {}
    try:
        for args, proc in procs.items():
            out, err = proc.communicate(timeout=120)
            done[args] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    finally:
        for proc in procs.values():  # ours, by their PIDs, if one timed out
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
    return done


@pytest.mark.parametrize("args, message", USAGE_ERRORS)
def test_the_cli_refuses_usage_errors_with_exit_2(args, message, usage_runs):
    p = usage_runs[tuple(args)]
    assert p.returncode == 2, p.stdout + p.stderr
    assert message in p.stderr


# -- on a real archive --------------------------------------------------------------------


class Archive:
    """30 of 50 awkward records archived as [0, 10), [10, 20), [20, 30), several objects each."""

    def __init__(self, kafka, swift, spark, new_topic):
        self.kafka, self.spark = kafka, spark
        self.name = new_topic()
        produce(kafka, self.name, awkward_rows(50, 1))
        self.cfg = TopicConfig(name=self.name, group=f"g-{uuid.uuid4().hex[:8]}", slice_records=4)
        self.store = swift.store()
        self.prefix = layout.join(self.store.params.prefix, self.cfg.prefix)
        self.docs = {}
        for start in (0, 10, 20):
            done = archive_range(OffsetRange(self.name, 0, start, start + 10), self.cfg, kafka, self.store, spark)
            self.docs[start] = done.manifest
        assert kafka.committed(self.name, [0], self.cfg.group) == {0: 30}

    def verify(self, sample: int | None = 0, **kw) -> Report:
        return verify_topic(self.kafka, self.store, self.prefix, self.cfg, sample, **{"since": EVERYTHING, **kw})

    def manifest_name(self, start: int, end: int | None = None) -> str:
        return layout.manifest_name(self.prefix, OffsetRange(self.name, 0, start, end or start + 10))


@pytest.fixture
def archive(kafka, swift, spark, new_topic):
    a = Archive(kafka, swift, spark, new_topic)
    yield a
    a.store.close()


def only(report: Report, kind: str) -> Problem:
    assert not report.loss, report.render()
    assert len(report.problems) == 1 and report.problems[0].kind == kind, report.render()
    return report.problems[0]


def test_a_sound_archive_verifies_ok_with_sampling_and_in_full(archive):
    plain = archive.verify()
    assert plain.ok, plain.render()
    assert plain.totals() == {"manifests": 3, "objects": 9, "records": 30,
                              "bytes": sum(d["bytes"] for d in archive.docs.values())}
    assert plain.compared == 0
    (p0,) = plain.partitions
    assert (p0.log_start, p0.log_end, p0.committed, p0.first_archived, p0.archived_end) == (0, 50, 30, 0, 30)
    sampled = archive.verify(sample=3)
    assert sampled.ok and sampled.compared == 9, sampled.render()
    full = archive.verify(sample=None)
    assert full.ok and full.compared == 30, full.render()


def test_a_deleted_object_is_reported_missing_by_name(archive):
    o = archive.docs[10]["objects"][1]
    archive.store.delete(o["name"])
    p = only(archive.verify(sample=None), MISSING)
    assert (p.partition, p.start, p.end, p.name) == (0, o["first_offset"], o["last_offset"] + 1, o["name"])
    assert p.message == (f"{archive.name}/0[10, 20): object {o['name']} of the manifest is missing from Swift")


def test_a_corrupted_object_is_reported_by_its_md5_or_its_size(archive):
    o = archive.docs[0]["objects"][0]
    data = archive.store.get(o["name"])
    archive.store.put(o["name"], data[:-9] + bytes(b ^ 0xFF for b in data[-9:]))  # same size
    p = only(archive.verify(), MD5)
    assert p.name == o["name"] and f"the manifest says {o['md5']}" in p.message
    archive.store.put(o["name"], data + b"\0")
    p = only(archive.verify(), SIZE)
    assert p.name == o["name"] and f"has {len(data) + 1} bytes" in p.message and f"says {o['bytes']} bytes" in p.message


def test_an_overlapping_extra_manifest_is_reported_with_the_offsets_held_twice(archive, swift):
    # A sound range [5, 15), archived under another prefix, copied next to the others.
    other = TopicConfig(name=archive.name, group=f"g-{uuid.uuid4().hex[:8]}", prefix="other", slice_records=4)
    done = archive_range(OffsetRange(archive.name, 0, 5, 15), other, archive.kafka, archive.store, archive.spark)
    src = layout.range_dir(layout.join(archive.store.params.prefix, "other"), OffsetRange(archive.name, 0, 5, 15))
    dst = layout.range_dir(archive.prefix, OffsetRange(archive.name, 0, 5, 15))
    doc = json.loads(json.dumps(done.manifest).replace(src, dst))
    for o in done.manifest["objects"]:
        archive.store.put(o["name"].replace(src, dst), archive.store.get(o["name"]))
    archive.store.put_json(layout.join(dst, layout.MANIFEST), doc)

    report = archive.verify(sample=None)
    assert not report.loss and _kinds(report.problems) == [(OVERLAP, 5, 10), (OVERLAP, 10, 15)], report.render()
    assert report.problems[0].message == (f"{archive.name}/0: manifests [0, 10) and [5, 15) both hold offsets [5, 10): "
                                          "every offset must be in exactly one entry")


def test_a_deleted_manifest_is_reported_as_the_gap_it_leaves(archive):
    archive.store.delete(archive.manifest_name(10))
    report = archive.verify(sample=2)
    p = only(report, GAP)
    assert (p.start, p.end) == (10, 20) and "below the committed offset 30" in p.message
    assert f"{archive.name}/0[10, 20): objects but no manifest: an unfinished attempt, not archived; the range's " \
           "next run rewrites them" in report.notes


def test_a_committed_offset_moved_past_the_archive_is_reported_uncovered(archive):
    archive.kafka.commit(archive.name, {0: 42}, archive.cfg.group)
    p = only(archive.verify(), UNCOVERED)
    assert (p.start, p.end) == (30, 42)
    assert f"committed (group {archive.cfg.group} at 42) but in no manifest: the archive ends at 30" in p.message


def test_records_deleted_before_they_were_archived_are_loss_not_problems(archive):
    delete_records(archive.kafka, archive.name, 0, 40)
    report = archive.verify(sample=None)  # also: expired records are not compared, not missed
    assert not report.problems and _kinds(report.loss) == [(LOSS, 30, 40)], report.render()
    assert not report.ok and report.lost_offsets == 10 and report.compared == 0


def test_an_archived_record_that_differs_from_kafkas_is_found_by_a_full_comparison(archive):
    # Rewrite one object with one header changed, and its manifest entry to match, so only
    # the comparison with Kafka can tell.
    doc = archive.docs[20]
    o = doc["objects"][1]
    rows = decode(archive.store.get(o["name"]), "parquet").to_pylist()
    rows[1]["headers"] = [{"key": "h", "value": b"forged"}]
    data = encode(pa.Table.from_pylist(rows, schema=SCHEMA), "parquet")
    archive.store.put(o["name"], data)
    o.update(bytes=len(data), md5=hashlib.md5(data).hexdigest())
    archive.store.put_json(archive.manifest_name(20), doc)

    assert archive.verify().ok  # sizes, checksums and counts all agree
    p = only(archive.verify(sample=None), DIFFERS)
    assert p.message == (f"{archive.name}/0[20, 30): 1 of 10 records compared with Kafka differ; first: record at "
                         f"offset {rows[1]['offset']} differs in headers (object {o['name']})")
    assert only(archive.verify(sample=10), DIFFERS).message == p.message


def test_a_manifest_that_lies_about_its_objects_is_reported(archive):
    doc = archive.docs[0]
    doc["objects"][0]["records"] += 1
    doc["records"] += 1
    doc["objects"][2]["last_offset"] = 10  # past the range's end
    archive.store.put_json(archive.manifest_name(0), doc)
    report = archive.verify()
    kinds = sorted(p.kind for p in report.problems)
    assert kinds == [OFFSETS, OFFSETS, "records"], report.render()
    assert not [p for p in report.problems if p.kind == MANIFEST]


def test_the_verify_job_fails_with_the_report_and_counts(archive, swift):
    job = verify_job([archive.cfg])
    config = {"ops": {"verify_archive": {"config": {"topic": archive.name, "sample": -1}}}}
    good = job.execute_in_process(run_config=config, resources={"kafka": archive.kafka, "swift": swift})
    assert good.success
    (ok_event,) = [e for e in good.all_events if e.event_type_value == "STEP_OUTPUT"]
    meta = ok_event.event_specific_data.metadata
    assert meta["ok"].value is True and meta["compared_with_kafka"].value == 30 and meta["manifests"].value == 3

    assert meta["scope"].value == "from the audit marks"  # the job's default; none yet: everything, once
    archive.store.delete(archive.docs[0]["objects"][0]["name"])
    archive.store.delete(archive.manifest_name(20))
    # Below the mark the default audit does not look again; a full audit does.
    assert job.execute_in_process(run_config=config, resources={"kafka": archive.kafka, "swift": swift}).success
    config["ops"]["verify_archive"]["config"]["audit_all"] = True
    bad = job.execute_in_process(run_config=config, resources={"kafka": archive.kafka, "swift": swift},
                                 raise_on_error=False)
    assert not bad.success
    failure = bad.failure_data_for_node("verify_archive").user_failure_data
    assert "2 PROBLEM(S)" in failure.description and "is missing from Swift" in failure.description
    meta = failure.metadata
    assert (meta["problems"].value, meta["problems_missing"].value, meta["problems_gap"].value) == (2, 1, 0)
    assert meta["problems_uncovered"].value == 1  # [20, 30) is committed, and now in no manifest


def test_the_cli_exits_0_when_sound_and_1_with_the_problems_printed(archive, swift, kafka_server, tmp_path):
    (tmp_path / "topics.yaml").write_text(f"topics:\n  - name: {archive.name}\n    group: {archive.cfg.group}\n")
    env = {**os.environ, "MATOS_TOPICS_FILE": str(tmp_path / "topics.yaml"),
           "MATOS_KAFKA_BOOTSTRAP_SERVERS": kafka_server.bootstrap_servers,
           "MATOS_SWIFT_AUTH_URL": swift.auth_url, "MATOS_SWIFT_CONTAINER": swift.container}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "matos_dagster", "audit", "--topic", archive.name, *args],
                              env=env, capture_output=True, text=True, timeout=120)

    p = cli("--sample", "2")
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"verify {archive.name}: OK" in p.stdout and "3 manifests, 9 objects, 30 records" in p.stdout
    assert "audited from the audit marks" in p.stdout
    archive.store.delete(archive.docs[10]["objects"][0]["name"])
    p = cli("--full")  # from the mark at 30: nothing new to audit
    assert p.returncode == 0 and "0 manifests" in p.stdout, p.stdout + p.stderr
    p = cli("--full", "--audit-all")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "1 PROBLEM(S)" in p.stdout and "[missing]" in p.stdout and archive.docs[10]["objects"][0]["name"] in p.stdout


# -- damage the checks must name (issue 20.6) ---------------------------------------------


def _rewrite(archive, start: int, index: int, rows: list[dict]) -> dict:
    """Object `index` of range `start` rewritten with `rows`, its manifest entry made to match,
    so that only decoding or the comparison with Kafka can tell."""
    doc = archive.docs[start]
    o = doc["objects"][index]
    data = encode(pa.Table.from_pylist(rows, schema=SCHEMA), "parquet")
    archive.store.put(o["name"], data)
    doc["records"] += len(rows) - o["records"]
    o.update(bytes=len(data), md5=hashlib.md5(data).hexdigest(), records=len(rows))
    archive.store.put_json(archive.manifest_name(start), doc)
    return o


def test_an_object_that_does_not_decode_is_reported_by_name(archive):
    o = archive.docs[10]["objects"][0]
    garbage = b"PAR1 not really parquet PAR1"
    archive.store.put(o["name"], garbage)
    o.update(bytes=len(garbage), md5=hashlib.md5(garbage).hexdigest())
    archive.store.put_json(archive.manifest_name(10), archive.docs[10])
    report = archive.verify(sample=None)
    p = only(report, "decode")
    assert p.name == o["name"] and f"object {o['name']} does not decode as parquet" in p.message
    assert f"{archive.name}/0[10, 20): not compared with Kafka, since an object of it is damaged" in report.notes


def test_a_manifest_that_is_not_json_is_reported_and_leaves_no_gap(archive):
    archive.store.put(archive.manifest_name(10), b'{"topic": "cut short')
    p = only(archive.verify(sample=None), MANIFEST)
    assert (p.start, p.end, p.name) == (10, 20, archive.manifest_name(10))
    assert f"manifest {archive.manifest_name(10)} is not valid JSON" in p.message


def test_a_record_missing_from_an_object_is_found_by_comparing_with_kafka(archive):
    o = archive.docs[20]["objects"][1]
    rows = decode(archive.store.get(o["name"]), "parquet").to_pylist()
    dropped = rows.pop(1)  # a middle row: the object's first and last offsets stay
    _rewrite(archive, 20, 1, rows)
    assert archive.verify().ok  # sizes, checksums and counts agree: only Kafka can tell
    p = only(archive.verify(sample=None), DIFFERS)
    assert (f"Kafka's record at offset {dropped['offset']} is not in the archive (object {o['name']})"
            in p.message), p.message


def test_an_extra_archived_record_is_found_by_comparing_with_kafka(kafka, swift, spark, new_topic):
    # A transaction's commit marker takes an offset that holds no record: archive a record there.
    topic = new_topic()
    producer = kafka.producer(**{"transactional.id": f"t-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, key=b"k", value=str(i).encode())
    producer.commit_transaction(30)  # records 0..4, the marker at 5
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}")
    with swift.store() as store:
        done = archive_range(OffsetRange(topic, 0, 0, 6), cfg, kafka, store, spark)
        doc = done.manifest
        (o,) = doc["objects"]
        rows = decode(store.get(o["name"]), "parquet").to_pylist()
        rows.append({**rows[-1], "offset": 5})
        data = encode(pa.Table.from_pylist(rows, schema=SCHEMA), "parquet")
        store.put(o["name"], data)
        o.update(bytes=len(data), md5=hashlib.md5(data).hexdigest(), records=6, last_offset=5)
        doc["records"] = 6
        prefix = layout.join(store.params.prefix, cfg.prefix)
        store.put_json(layout.manifest_name(prefix, OffsetRange(topic, 0, 0, 6)), doc)
        report = verify_topic(kafka, store, prefix, cfg, None)
    assert len(report.problems) == 1 and report.problems[0].kind == DIFFERS, report.render()
    assert f"archived record at offset 5 is not in Kafka (object {o['name']})" in report.problems[0].message


def test_kafka_unreadable_in_the_middle_of_a_comparison_makes_the_audit_not_ok(archive):
    # Retention deletes every archived record once the first range is compared: the other
    # two ranges can no longer be compared, and an audit that could not compare is not ok.
    def after_range(line: str) -> None:
        if "[0, 10) checked" in line:
            delete_records(archive.kafka, archive.name, 0, 30)

    report = verify_topic(archive.kafka, archive.store, archive.prefix, archive.cfg, None, say=after_range)
    assert not report.ok, report.render()
    assert [(p.kind, p.start, p.end) for p in report.problems] == [(UNCOMPARED, 10, 20), (UNCOMPARED, 20, 30)]
    assert "could not be compared with Kafka" in report.problems[0].message
    assert report.compared == 10  # the first range, compared in full before the records went


def test_records_hidden_by_an_open_transaction_are_reported_hidden_not_ok(archive):
    # Kafka's last stable offset never moves back, so an open transaction can hide archived
    # offsets only in a topic made anew: here the topic is deleted and created again (the
    # disaster a restore into the topic itself mends), its first 10 records produced again as
    # they were, then a producer opens a transaction at offset 10 and leaves it open, and
    # others go on writing past the archive's end. read_committed readers see nothing from 10.

    kafka, topic = archive.kafka, archive.name
    originals = read_kafka(kafka, topic, 0)
    delete_topic(kafka, topic)
    kafka.create_topic(topic, 1)
    plain = kafka.producer()
    for r in originals[:10]:
        plain.produce(topic, key=r["key"], value=r["value"], headers=[(h["key"], h["value"]) for h in r["headers"]],
                      timestamp=r["timestamp"], partition=0)
    assert plain.flush(30) == 0
    tx = kafka.producer(**{"transactional.id": f"tx-{uuid.uuid4().hex[:8]}"})
    tx.init_transactions(30)
    tx.begin_transaction()
    tx.produce(topic, key=b"open", value=b"open", partition=0)
    tx.flush(30)  # offset 10, in a transaction that is neither committed nor aborted
    try:
        produce(kafka, topic, [(b"later", b"v", [])] * 30, partition=0)  # the log goes on past 30
        for sample in (None, 3):  # every record, and samples
            report = archive.verify(sample=sample)
            assert not report.ok, report.render()
            hidden = [p for p in report.problems if p.kind == UNCOMPARED]
            assert [(p.start, p.end) for p in hidden] == [(10, 20), (20, 30)], report.render()
            assert not [p for p in report.problems if p.kind == DIFFERS], report.render()
            for p, end in zip(hidden, (20, 30)):
                assert f"a transaction open at offset 10 hides the records up to {end}" in p.message, p.message
                assert "run the audit again when Kafka answers" in p.message
            assert report.compared == (10 if sample is None else 3)  # the first range was compared
    finally:
        tx.abort_transaction(30)


def test_a_topic_made_anew_with_fewer_records_is_reported_as_ending_early_not_as_hidden(archive):
    # The same silence of read_committed readers (no record before the range's end) without any
    # transaction: the log simply ends there. The audit must not blame a transaction.

    kafka, topic = archive.kafka, archive.name
    originals = read_kafka(kafka, topic, 0)
    delete_topic(kafka, topic)
    kafka.create_topic(topic, 1)
    plain = kafka.producer()
    for r in originals[:5]:
        plain.produce(topic, key=r["key"], value=r["value"], headers=[(h["key"], h["value"]) for h in r["headers"]],
                      timestamp=r["timestamp"], partition=0)
    assert plain.flush(30) == 0
    report = archive.verify(sample=None)
    uncompared = [p for p in report.problems if p.kind == UNCOMPARED]
    assert [(p.start, p.end) for p in uncompared] == [(0, 10), (10, 20), (20, 30)], report.render()
    assert "Kafka's log ends at offset 5, before 10" in uncompared[0].message, uncompared[0].message
    assert not any("transaction" in p.message for p in report.problems), report.render()
    assert report.compared == 5


# -- the audit mark: the default audit's listings do not grow with the history (issue 13.1) --


def test_the_default_audit_starts_at_the_mark_and_moves_it(archive):
    first = archive.verify(since=FROM_MARK)  # no mark yet: from the first entry, once
    assert first.ok and first.totals()["manifests"] == 3, first.render()
    assert first.partitions[0].mark == 30
    assert archive.store.get_json(mark_name(archive.prefix, archive.name, 0))["offset"] == 30

    archive_range(OffsetRange(archive.name, 0, 30, 40), archive.cfg, archive.kafka, archive.store, archive.spark)
    second = archive.verify(since=FROM_MARK)
    assert second.ok and second.totals()["manifests"] == 1, second.render()  # only the new range
    assert (second.partitions[0].audited_from, second.partitions[0].mark) == (30, 40)

    # Damage below the mark: the default audit does not look there; a full audit does, and
    # pulls the mark back, so the default audit goes on reporting it until it is mended.
    o = archive.docs[0]["objects"][0]
    archive.store.put(o["name"], b"x" * o["bytes"])
    assert archive.verify(since=FROM_MARK).totals()["manifests"] == 0
    full = archive.verify(since=EVERYTHING, move_mark=True)
    assert only(full, MD5).name == o["name"] and full.partitions[0].mark == 0
    again = archive.verify(since=FROM_MARK)
    assert only(again, MD5).name == o["name"] and again.partitions[0].audited_from == 0


def test_an_audit_from_an_offset_above_the_mark_leaves_the_mark(archive):
    archive.store.put_json(mark_name(archive.prefix, archive.name, 0),
                           {"topic": archive.name, "partition": 0, "offset": 10})
    report = archive.verify(since=20, move_mark=True)
    assert report.ok and report.totals()["manifests"] == 1 and report.partitions[0].mark == 10, report.render()
    assert archive.store.get_json(mark_name(archive.prefix, archive.name, 0))["offset"] == 10
    report = archive.verify(since=10, move_mark=True)
    assert report.ok and report.totals()["manifests"] == 2 and report.partitions[0].mark == 30, report.render()


def _synthetic_history(store, prefix: str, topic: str, ranges: list[tuple[int, int]]) -> None:
    """Manifest folders that are listed but never read: the history below the audit mark."""
    for lo, hi in ranges:
        store.put(layout.manifest_name(prefix, OffsetRange(topic, 0, lo, hi)), b"{}")


def test_the_default_audit_lists_as_much_with_1_or_200_ranges_below_the_mark(kafka, swift, spark, new_topic):
    topic = new_topic()
    produce(kafka, topic, awkward_rows(210, 1))
    listings = {}
    with swift.store() as store:
        for n in (1, 200):
            cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}", prefix=f"h{n}")
            prefix = layout.join(store.params.prefix, cfg.prefix)
            _synthetic_history(store, prefix, topic, [(i * 200 // n, (i + 1) * 200 // n) for i in range(n)])
            kafka.commit(topic, {0: 200}, cfg.group)
            archive_range(OffsetRange(topic, 0, 200, 210), cfg, kafka, store, spark)
            store.put_json(mark_name(prefix, topic, 0), {"topic": topic, "partition": 0, "offset": 200})
            before = store.listings
            report = verify_topic(kafka, store, prefix, cfg, 0, since=FROM_MARK)
            listings[n] = store.listings - before
            assert report.ok and report.totals()["manifests"] == 1, report.render()
            assert report.partitions[0].mark == 210
    assert listings[1] == listings[200], listings


def test_an_acknowledged_loss_is_reported_apart_and_leaves_the_audit_ok(archive):
    from matos_dagster.core.archive.loss import acknowledge

    delete_records(archive.kafka, archive.name, 0, 40)  # [30, 40) deleted before it was archived
    before = archive.verify()
    assert not before.ok and _kinds(before.loss) == [(LOSS, 30, 40)] and not before.acknowledged, before.render()
    assert "acknowledge-loss" in before.loss[0].message

    acknowledge(archive.kafka, archive.store, archive.prefix, archive.cfg, 0, "retention outran an outage")
    after = archive.verify(since=FROM_MARK)
    assert after.ok and not after.problems and not after.loss, after.render()
    (ack,) = after.acknowledged
    assert (ack.kind, ack.partition, ack.start, ack.end) == (ACKNOWLEDGED, 0, 30, 40)
    assert "retention outran an outage" in ack.message and after.acknowledged_offsets == 10
    assert "acknowledged loss (10 offsets, recorded in the archive)" in after.render()
    assert after.partitions[0].mark == 40  # the audited run goes on past the loss


def test_the_cli_imports_no_definitions_and_reads_every_setting_of_its_resources(tmp_path):
    # definitions -> jobs/verify -> verify must not lead back to definitions (issue 13.1).
    code = ("import sys; from matos_dagster.cli.audit import main; code = main(['--topic', 'nope']); "
            "print(code, 'matos_dagster.definitions' in sys.modules)")
    env = {**os.environ, "MATOS_TOPICS_FILE": str(PROJECT_ROOT / "topics.yaml")}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.stdout.split() == ["2", "False"], p.stdout + p.stderr
    from matos_dagster.core.settings import SETTINGS
    from matos_dagster.resources import KafkaResource, SwiftResource

    names = {s.name for s in SETTINGS}
    for cls, prefix in ((KafkaResource, "MATOS_KAFKA_"), (SwiftResource, "MATOS_SWIFT_")):
        assert {f"{prefix}{f.upper()}" for f in cls.model_fields} <= names, cls
