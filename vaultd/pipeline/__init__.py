"""The pure indexing stages: discover, detect, parse, chunk and watch.

Each stage turns files or frozen records (`vaultd.records`) into other frozen records. A stage
imports only the foundation (`errors`, `records`, `config`); stages never import one another,
and nothing here touches the model or the store: `vaultd.index` is where they meet.

**Extractors: one contract for every kind of file** (`records.NoteKind`: note, canvas, pdf,
image, code, excalidraw). Each kind has a stage module with one entry point::

    def extract(path: str, data: bytes, *, max_bytes: int, ...) -> Note

- `path` is the vault path, `data` the file's bytes as read and hashed by the indexer; the
  extractor reads nothing else (no file, no network, no model download) and keeps no state.
- It returns a `Note` with `kind` set, a `title` (the file name without its suffix unless the
  file says better), `links` (what the file points to: a canvas's file cards, a note's
  wikilinks; `Link.line` the extracted text's line, or None for the whole file), `errors`
  (problems that leave the file usable) and `blocks`: the passages to index, each with a
  1-based, inclusive line range in the text extracted (`body`, which is those blocks' text
  joined by blank lines, so line numbers order and bound passages) and, where the kind has one,
  its `location` (a `records.Location`): `page`/`page_end` (PDF pages, 1-based, inclusive),
  `node` (a canvas card's id), `symbol` (`class Indexer > def reconcile`). A block may give
  its heading path itself (`Block.headings`: a canvas group's label, a PDF outline's headings).
- The chunker (`chunk.chunk_note`) turns any kind's note into chunks: a block with a location
  is a chunk of its own when it fits the token budget; an oversize one is cut by a line window
  of about 90% of the budget, no overlap, every piece keeping the location. Blocks without one
  are packed by section as a Markdown note's are.
- A file that cannot be extracted raises the project's error (`vaultd.errors`) with a reason:
  `LeftOutError` (with its kind) for a file that is no indexable input (no text layer,
  encrypted, truncated, not the format its name says, too big), `NoteError` for a failure that
  may pass. The indexer then leaves the file out (or fails it), records and reports it by path
  and reason, and goes on with the rest of the vault; an extractor never returns a silent empty
  note for a file it could not read.
- Extraction that can crash or hang on a hostile file (PDF, OCR) is run by the indexer in a
  worker process with a time and memory limit (`[attachments]` in the config); the extractor
  itself is an ordinary function of bytes.
- `parse.parse_file(path, data, kinds=...)` picks the extractor by the file's name (`kind_of`)
  and is what the indexer and its parser workers call.
"""
