"""BEIR-format data and the retrieval metrics BEIR reports.

A BEIR dataset is a folder with `corpus.jsonl` (`_id`, `title`, `text`), `queries.jsonl`
(`_id`, `text`) and relevance judgements as TSV (`query-id`, `corpus-id`, `score`), either
`qrels.tsv` or `qrels/<split>.tsv`.

The metrics follow BEIR's use of pytrec_eval: nDCG@k with graded gains (the judgement score
itself) and a log2 rank discount, the ideal ranking built from every judged-relevant document;
recall@k is the share of a query's relevant documents found in its top k. Both are averaged
over every judged query, so a query with no results counts as 0.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: query id -> document id -> relevance grade (> 0 means relevant).
Qrels = dict[str, dict[str, int]]


@dataclass(frozen=True, slots=True)
class Document:
    id: str
    title: str
    text: str


@dataclass(frozen=True, slots=True)
class Dataset:
    corpus: list[Document]
    queries: dict[str, str]
    qrels: Qrels

    def judged_queries(self) -> list[tuple[str, str]]:
        """(query id, text) of every query with at least one relevant document, in file order."""
        return [(qid, text) for qid, text in self.queries.items() if self.qrels.get(qid)]


def _jsonl(path: Path) -> Iterable[dict[str, object]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: not JSON: {exc}") from exc


def qrels_path(folder: Path, split: str = "test") -> Path:
    """`qrels.tsv` if the folder has one, else BEIR's `qrels/<split>.tsv`."""
    for candidate in (folder / "qrels.tsv", folder / "qrels" / f"{split}.tsv"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no qrels.tsv or qrels/{split}.tsv in {folder}")


def load_qrels(path: Path) -> Qrels:
    qrels: Qrels = {}
    with path.open(encoding="utf-8", newline="") as handle:
        rows = csv.reader(handle, delimiter="\t")
        for row in rows:
            if not row or row[0] == "query-id":
                continue
            query_id, doc_id, score = row[0].strip(), row[1].strip(), int(row[2])
            qrels.setdefault(query_id, {})[doc_id] = score
    return {qid: docs for qid, docs in qrels.items() if any(s > 0 for s in docs.values())}


def load_dataset(folder: Path, split: str = "test") -> Dataset:
    """Read a BEIR dataset; only the queries that have judgements are kept."""
    qrels = load_qrels(qrels_path(folder, split))
    corpus = [
        Document(id=str(row["_id"]), title=str(row.get("title") or ""), text=str(row["text"]))
        for row in _jsonl(folder / "corpus.jsonl")
    ]
    queries = {
        str(row["_id"]): str(row["text"])
        for row in _jsonl(folder / "queries.jsonl")
        if str(row["_id"]) in qrels
    }
    missing = sorted(set(qrels) - set(queries))
    if missing:
        raise ValueError(f"{len(missing)} judged queries have no text, e.g. {missing[:3]}")
    return Dataset(corpus=corpus, queries=queries, qrels=qrels)


# -- metrics -----------------------------------------------------------------------------------


def dedupe(ids: Iterable[str]) -> list[str]:
    """Keep each id at its first (best) rank."""
    return list(dict.fromkeys(ids))


def ndcg_at(ranking: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    dcg = sum(relevant.get(doc, 0) / math.log2(rank + 1) for rank, doc in enumerate(ranking[:k], 1))
    ideal = sorted((g for g in relevant.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal, 1))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at(ranking: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    wanted = {doc for doc, grade in relevant.items() if grade > 0}
    if not wanted:
        return 0.0
    return len(wanted.intersection(ranking[:k])) / len(wanted)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation, as numpy's default."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
