"""Rerank datasets (harness.data.rerank): rows read once, a bad row one line naming it,
synthetic queries of exact lengths."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.data.rerank import build_rank_dataset
from harness.errors import DatasetError

pytestmark = pytest.mark.parallel  # its verdicts do not depend on speed (tests/conftest.py)


def test_rerank_datasets_read_once_and_a_bad_row_is_one_line(tmp_path: Path):
    ds = build_rank_dataset("synthetic-rerank:n=3,docs=4,doc_len=5,query_len=2", 0)
    rows = [ds.materialize(i) for i in range(3)]
    assert [len(r.documents) for r in rows] == [4, 4, 4] and {len(d.split()) for r in rows for d in r.documents} == {5}
    assert [r.target_input_tokens for r in rows] == [22, 22, 22] and ds.ranking_truth()["relevance"] is None
    bad = tmp_path / "bad.jsonl"
    for text, message in [
        ('{"query": "q", "documents": ["a", "b"], "relevance": [1]}', "must be a label >= 0 for each of the 2 documents"),
        ('{"query": "q", "documents": []}', "`documents` must be a non-empty list of strings"),
        ('{"query": "q", "documents": ["a"], "relevance": [1]}\n{"query": "q", "documents": ["a"]}',
         "row 1 has no `relevance`, while row 0 has"),
        ('{"query": "q", "docs": ["a"]}', "unknown field(s) docs"),
    ]:
        bad.write_text(text + "\n")
        with pytest.raises(DatasetError) as e:
            build_rank_dataset(f"rerank:{bad}", 0)
        assert message in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(DatasetError, match="metric 'map' is not one of ndcg, mrr"):
        build_rank_dataset(f"rerank:{bad},metric=map", 0)


def test_a_labelled_file_keeps_each_samples_documents_and_labels_for_the_folder(tmp_path: Path):
    good = tmp_path / "good.jsonl"
    good.write_text('{"query": "q0", "documents": ["a", "b", "c"], "relevance": [0, 2, 1]}\n\n'
                    '{"query": "q1", "documents": ["d"], "relevance": [0.5], "id": "x"}\n')
    ds = build_rank_dataset(f"rerank:{good},metric=mrr,k=3", 0)
    assert len(ds) == 2 and ds.materialize(0).documents == ("a", "b", "c")
    assert ds.ranking_truth() == {"documents": [3, 1], "relevance": [[0.0, 2.0, 1.0], [0.5]], "metric": "mrr", "k": 3}
    assert ds.describe()["documents"] == 4 and ds.fingerprint() == build_rank_dataset(f"rerank:{good}", 0).fingerprint()
    with pytest.raises(DatasetError, match="k must be an integer >= 1"):
        build_rank_dataset(f"rerank:{good},k=0", 0)
