"""Which delete files apply to which data file (spec "Scan Planning"), pure: the rules the Spark
comparisons in test_read_vs_spark.py exercise on real tables, here at their edges."""

from __future__ import annotations

from pyiceberg_crypto.read.plan import ContentFile, DeleteIndex
from pyiceberg_crypto.verify.report import DATA, DELETION_VECTOR, EQUALITY_DELETE, POSITION_DELETE


def content(path, kind, seq, spec_id=1, partition=None, referenced=None):
    return ContentFile(path, kind, "PARQUET", None, 10, 1, seq, spec_id, partition or {},
                       equality_ids=(1,) if kind == EQUALITY_DELETE else (), referenced_data_file=referenced)


def test_positions_apply_at_or_after_the_data_sequence_number_equality_strictly_after():
    index = DeleteIndex(unpartitioned_specs={0})
    data = content("d1", DATA, 5, partition={"p": 1})
    for delete in [
        content("dv-same", DELETION_VECTOR, 5, referenced="d1"),
        content("dv-older", DELETION_VECTOR, 4, referenced="d1"),
        content("dv-other-file", DELETION_VECTOR, 9, referenced="d2"),
        content("pos-any", POSITION_DELETE, 6),
        content("pos-other", POSITION_DELETE, 6, referenced="d2"),
        content("eq-same-seq", EQUALITY_DELETE, 5, partition={"p": 1}),
        content("eq-later", EQUALITY_DELETE, 6, partition={"p": 1}),
        content("eq-other-partition", EQUALITY_DELETE, 6, partition={"p": 2}),
        content("eq-other-spec", EQUALITY_DELETE, 6, spec_id=2, partition={"p": 1}),
        content("eq-global", EQUALITY_DELETE, 6, spec_id=0),
        content("eq-global-older", EQUALITY_DELETE, 3, spec_id=0),
    ]:
        index.add(delete)
    task = index.task_for(data)
    assert [d.path for d in task.deletion_vectors] == ["dv-same"]
    assert [d.path for d in task.position_deletes] == ["pos-any"]
    assert sorted(d.path for d in task.equality_deletes) == ["eq-global", "eq-later"]
