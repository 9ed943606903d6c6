"""Commit records read from the watched objects that carry them, and the book that keeps
them: the newest of a gang's records is in force, and copies its bindings carried onto bound
members are settled, not taken back."""

from __future__ import annotations

from typing import Any

import pytest
from source_fakes import RecordingWriter

from builders import pod_obj, podgroup_obj
from clocks import FakeClock
from phalanx.core.rollforward import COMMIT_ANNOTATION, CommitRecord, encode_commit_record
from phalanx.sources.kube_commits import CommitBook, Recorded, commit_of, decode_pod

pytestmark = pytest.mark.anyio

KEY = "default/g"
PG_PATH = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups/g"


def record(at: str, *members: str) -> CommitRecord:
    return CommitRecord(KEY, {f"default/{m}": "n1" for m in members}, {}, at)


def carrying(book: CommitBook, name: str, rec: CommitRecord, *, node: str = "n1") -> None:
    """The watch shows pod `name` with `rec` as its annotation (bound to `node`, or not)."""
    notes = {COMMIT_ANNOTATION: encode_commit_record(rec, rec.at)}
    book.saw_pod(
        f"default/{name}", decode_pod(pod_obj(name, group="g", node=node, annotations=notes))
    )


def on_the_podgroup(book: CommitBook, rec: CommitRecord) -> None:
    notes = {COMMIT_ANNOTATION: encode_commit_record(rec, rec.at)}
    raw: dict[str, Any] = podgroup_obj("g", 2)
    raw["metadata"]["annotations"] = notes
    commit, error = commit_of(KEY, raw)
    assert error == ""
    book.saw_group(KEY, Recorded(raw, commit))


def book_of(writer: RecordingWriter, *, podgroup: bool = True) -> CommitBook:
    return CommitBook(writer, lambda _: PG_PATH if podgroup else None, lambda: 0.0)


def test_a_pod_whose_commit_record_is_nested_too_deeply_is_kept_with_the_records_problem() -> None:
    # An annotation holds up to 256 KiB: room for far more nesting than Python's parser takes.
    raw = pod_obj("w-0", group="train", annotations={COMMIT_ANNOTATION: "[" * 100_000})

    recorded = decode_pod(raw)

    assert recorded.obj.name == "w-0"
    assert recorded.commit is None
    assert recorded.commit_error == f"{COMMIT_ANNOTATION} is not JSON: nested too deeply"


def test_the_annotation_a_binding_carries_is_the_record_stamped_now() -> None:
    book = CommitBook(RecordingWriter(), lambda _: PG_PATH, lambda: 1_800_000_000.0)
    notes = book.carried(record("", "g-0", "g-1"))
    assert list(notes) == [COMMIT_ANNOTATION]
    text = notes[COMMIT_ANNOTATION]
    assert '"at":"2027-01-15T08:00:00Z"' in text
    assert '"placements":{"default/g-0":"n1","default/g-1":"n1"}' in text


def test_each_binding_is_stamped_when_it_is_sent_and_carries_its_own_gangs_record() -> None:
    wall = FakeClock(1_800_000_000.0)
    book = CommitBook(RecordingWriter(), lambda _: PG_PATH, wall)
    first, other = record("", "g-0", "g-1"), record("", "h-0")
    assert book.carried(first) == book.carried(first)  # the same gang, the same second
    wall.now += 1
    assert '"at":"2027-01-15T08:00:01Z"' in book.carried(first)[COMMIT_ANNOTATION]
    assert '"placements":{"default/h-0":"n1"}' in book.carried(other)[COMMIT_ANNOTATION]
    assert '"default/g-1"' in book.carried(first)[COMMIT_ANNOTATION]


def test_the_newest_of_a_gangs_records_is_in_force_wherever_each_is_kept() -> None:
    book = book_of(RecordingWriter())
    on_the_podgroup(book, record("2026-12-01T10:00:00Z", "old-0", "old-1"))
    carrying(book, "g-0", record("2026-12-01T10:05:00Z", "g-0", "g-1"))
    assert set(book.records()[KEY].placements) == {"default/g-0", "default/g-1"}
    on_the_podgroup(book, record("2026-12-01T10:09:00Z", "new-0", "new-1"))
    assert set(book.records()[KEY].placements) == {"default/new-0", "default/new-1"}


async def test_clearing_settles_the_copies_on_bound_members_without_a_write() -> None:
    writer = RecordingWriter()
    book = book_of(writer)
    rec = record("2026-12-01T10:00:00Z", "g-0", "g-1")
    carrying(book, "g-0", rec)
    carrying(book, "g-1", rec)

    await book.clear(KEY)

    assert writer.patches == []  # each copy says how its pod was bound: it stays
    assert KEY not in book.records()
    carrying(book, "g-1", rec)  # the same copy seen again (a status update): still settled
    assert KEY not in book.records()
    newer = record("2026-12-01T10:01:00Z", "g-2", "g-3")
    carrying(book, "g-2", newer)  # the gang bound again: its new record is in force
    assert book.records()[KEY] == newer


async def test_clearing_takes_the_record_off_the_podgroup_and_off_unbound_members() -> None:
    writer = RecordingWriter()
    book = book_of(writer)
    rec = record("2026-12-01T10:00:00Z", "g-0", "g-1")
    on_the_podgroup(book, rec)
    carrying(book, "g-1", rec, node="")  # written on a member before it was bound

    await book.clear(KEY)

    removed = {COMMIT_ANNOTATION: None}
    assert sorted(writer.patches) == [
        ("/api/v1/namespaces/default/pods/g-1", {"metadata": {"annotations": removed}}),
        (PG_PATH, {"metadata": {"annotations": removed}}),
    ]
    assert book.records() == {}


async def test_a_settled_gang_whose_members_are_all_gone_leaves_nothing_behind() -> None:
    book = book_of(RecordingWriter())
    rec = record("2026-12-01T10:00:00Z", "g-0")
    carrying(book, "g-0", rec)
    await book.clear(KEY)
    book.forget_pod("default/g-0")
    assert book._settled == {}  # noqa: SLF001  # a long-running instance keeps nothing of it
    assert book._pods_of == {}  # noqa: SLF001
    carrying(book, "g-0", rec)  # the pod seen again (a relist): its copy is no longer settled
    assert book.records()[KEY] == rec
