"""Which files under the vault are notes: the ignore rules (`rules`), a streaming walk
(`walk`), and reading a note as the rules admit it (`reading`).

The rules, in the order they are applied (the first that rejects a path wins, so exclude
beats include):

1. only regular files of a kind indexed: `*.md` (any case) and Excalidraw drawings always,
   canvases, PDFs and images as `[attachments]` says, source files matching its `code`
   globs (`records.kind_of`); a file of any other kind is counted in `Discovery.unindexed`
   by its kind, so status and doctor can say what the vault holds that is not indexed;
2. never dot-files, dot-directories (`.obsidian/`, `.trash/`, `.git/`) or `node_modules/`;
3. never editor swap, backup and temp files;
4. with `skip_conflicts`, never the copies sync tools leave on conflicting edits;
5. with `use_gitignore`, `.gitignore` and `.ignore` files anywhere in the vault;
6. the user's `exclude` globs, then their `include` globs when there are any;
7. symlinks only with `follow_symlinks`, and never to something outside the vault;
8. nothing bigger than `max_file_mb` (a PDF: `max_pdf_mb`, an image: `max_image_mb`);
9. nothing whose name is not valid UTF-8.

Paths are vault-relative POSIX strings in Unicode NFC, so a note synced from macOS (which may
store names decomposed) has the same path everywhere, and rules match it either way.

What a user would want to hear about (a folder that cannot be read, a name that is not UTF-8,
a link out of the vault or in a loop, two spellings of one name, a file over the size cap) is
listed in `Discovery.skipped` after each walk and logged the first time it is seen. A note over
the size cap is a note left out: it is also put in `Discovery.left_out`, by the walk and by
`state_of` alike, and the indexer records, logs and reports it (the manifest remembers it).
"""

from vaultd.pipeline.discover.rules import UNDECODABLE, IgnoreRules
from vaultd.pipeline.discover.walk import Discovery, file_state

__all__ = ["UNDECODABLE", "Discovery", "IgnoreRules", "file_state"]
