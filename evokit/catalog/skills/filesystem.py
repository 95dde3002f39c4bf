"""Skills over archives and directory trees: tar list / extract / create, find by size and time,
permission audits, checksums.

Expected outputs come from the scenario's records (member names and contents; file sizes,
times, modes and bodies). Paths in tree outputs are relative to the tree root without a
leading ``./`` (what ``find -printf '%P'`` prints), and every sort is in byte order.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from evokit.catalog.base import OUT_DIR, Skill, StepContext, StepSpec, lines
from evokit.catalog.registry import register_skill
from evokit.catalog.skills.fields import derived_list


def _c(s: str) -> bytes:  # LC_ALL=C order
    return s.encode()


_TAB_SORT = "LC_ALL=C sort -t \"$(printf '\\t')\""


# --------------------------------------------------------------------------------- tar
def tar_list(ctx: StepContext) -> StepSpec:
    recs, path, out = ctx.dataset.records, ctx.path, ctx.out
    regular = [r for r in recs if r["type"] == "file"]
    query = ctx.choose("query", ["files", "largest"])
    # Member names hold no spaces, so the 6th column of `tar -tv` is the name.
    if query == "files":
        result = sorted((r["name"] for r in regular), key=_c)
        sol = f"tar -tvzf {path} | awk '$1 ~ /^-/ {{print $6}}' | LC_ALL=C sort > {out}"
        ask = [f"List the regular files stored in the archive `{path}` (not directories, not symbolic links), "
               f"with their member names exactly as stored in the archive, sorted in byte order (LC_ALL=C), one per "
               f"line, in `{out}`.",
               f"Write to `{out}` the member names of every regular file in `{path}` (skip directory and symlink "
               f"entries; keep each name exactly as the archive stores it), one per line, C-locale sorted."]
    else:
        k = ctx.choose("k", [3, 4, 5])
        top = sorted(regular, key=lambda r: (-r["size"], _c(r["name"])))[:k]
        result = [f"{r['size']} {r['name']}" for r in top]
        sol = (f"tar -tvzf {path} | awk '$1 ~ /^-/ {{print $3, $6}}' | LC_ALL=C sort -k1,1nr -k2,2 "
               f"| head -n {k} > {out}")
        ask = [f"Find the {k} largest regular files in the archive `{path}` without extracting it; write "
               f"`<size in bytes> <member name as stored>` lines to `{out}`, largest first (ties: name in byte "
               f"order).",
               f"Which {k} files in `{path}` are biggest? Save `<bytes> <member name>` for each (name exactly as in "
               f"the archive) to `{out}`, biggest first, ties broken by byte order of the name."]
    return StepSpec(instructions=ask, solution=sol, expected=lines(result), output=out,
                    output_dataset=derived_list(ctx, result, "archive listing"))


def tar_extract_member(ctx: StepContext) -> StepSpec:
    ds, path, out = ctx.dataset, ctx.path, ctx.out
    regular = [r for r in ds.records if r["type"] == "file"]
    rel = ctx.choose("member", sorted(r["rel"] for r in regular))
    member = next(r for r in regular if r["rel"] == rel)
    return StepSpec(
        instructions=[
            f"The archive `{path}` holds a project. Write the exact content of the project's file `{rel}` (path "
            f"relative to the project's top directory; list the archive to see how members are named) to `{out}`.",
            f"Without unpacking the whole archive `{path}`, extract the project file `{rel}` (relative to the "
            f"project root inside the archive) and save its content, byte for byte, as `{out}`.",
        ],
        solution=f"tar -xzOf {path} '{member['name']}' > {out}", expected=member["content"].encode(), output=out)


def _ext(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    return name.rsplit(".", 1)[-1] if "." in name else ""


def _pick_ext(ctx: StepContext) -> tuple[str, list[dict]]:
    recs = ctx.dataset.records
    exts = sorted({_ext(r["path"]) for r in recs if sum(_ext(x["path"]) == _ext(r["path"]) for x in recs) >= 2})
    ext = ctx.choose("ext", [e for e in exts if e])
    return ext, [r for r in recs if _ext(r["path"]) == ext]


def tar_create(ctx: StepContext) -> StepSpec:
    tree, out = ctx.path, ctx.out
    ext, hits = _pick_ext(ctx)
    archive = f"{OUT_DIR}/step{ctx.index}.tar.gz"
    result = sorted((r["path"] for r in hits), key=_c)
    # The archive's bytes depend on the tar version and clock; its member list does not.
    sol = (f"(cd {tree} && find . -type f -name '*.{ext}' -printf '%P\\0' | tar -czf {archive} --null -T -)\n"
           f"tar -tzf {archive} | LC_ALL=C sort > {out}")
    return StepSpec(
        instructions=[
            f"Pack every `*.{ext}` file found anywhere under `{tree}` into the gzip-compressed tar archive "
            f"`{archive}`: regular files only, no directory entries, member names relative to `{tree}` (like "
            f"`dir/name.{ext}`, no leading `./`). Then write the archive's member list (as `tar -tzf` prints it), "
            f"sorted in byte order, to `{out}`.",
            f"Create `{archive}` (tar + gzip) containing exactly the `*.{ext}` files of the tree `{tree}`, at any "
            f"depth, stored under their paths relative to `{tree}` without `./` and without directory entries; "
            f"save `tar -tzf` of the result, C-locale sorted, as `{out}`.",
        ],
        solution=sol, expected=lines(result), output=out, output_dataset=derived_list(ctx, result, "archive members"))


# -------------------------------------------------------------------------------- find
def find_by_size(ctx: StepContext) -> StepSpec:
    recs, tree, out = ctx.dataset.records, ctx.path, ctx.out
    direction = ctx.choose("direction", ["smaller", "larger"])
    kib = ctx.choose("kib", [1, 2, 3])
    limit = kib * 1024
    hits = [r for r in recs if (r["size"] < limit if direction == "smaller" else r["size"] > limit)]
    result = [f"{r['size']}\t{r['path']}" for r in sorted(hits, key=lambda r: (-r["size"], _c(r["path"])))]
    op = "-" if direction == "smaller" else "+"
    # -size -Nk rounds sizes up to whole KiB (a 1500-byte file is not "-2k"); count bytes instead.
    sol = (f"(cd {tree} && find . -type f -size {op}{limit}c -printf '%s\\t%P\\n') | {_TAB_SORT} -k1,1nr -k2,2 "
           f"> {out}")
    than = f"strictly {direction} than {kib} KiB ({limit} bytes)"
    return StepSpec(
        instructions=[
            f"Find every regular file under `{tree}` whose size is {than}. Write `<size in bytes><TAB><path>` "
            f"lines to `{out}` (path relative to `{tree}`, no leading `./`), largest first, ties by path in byte "
            f"order.",
            f"List the files in the tree `{tree}` that are {than}: one `<bytes>`, a tab, and the path relative "
            f"to `{tree}` (without `./`) per line, sorted by size descending and then path (C locale); save the "
            f"list as `{out}`.",
        ],
        solution=sol, expected=lines(result), output=out)


def _month_bounds(month: str) -> tuple[datetime, datetime]:
    start = datetime.strptime(month, "%Y-%m")
    end = (start + timedelta(days=32)).replace(day=1)
    return start, end


def find_by_mtime(ctx: StepContext) -> StepSpec:
    recs, tree, out = ctx.dataset.records, ctx.path, ctx.out
    newest = sorted(recs, key=lambda r: r["mtime"], reverse=True)  # mtimes are distinct
    query = ctx.choose("query", ["month", "recent"])
    listing = f"(cd {tree} && find . -type f {{test}} -printf '%T@\\t%P\\n') | {_TAB_SORT} -k1,1nr | cut -f 2- > {out}"
    rel = f"paths relative to `{tree}` without a leading `./`"
    if query == "month":
        months = sorted({r["mtime"][:7] for r in recs})
        month = ctx.choose("month", [m for m in months if sum(r["mtime"][:7] == m for r in recs) >= 2] or months)
        start, end = _month_bounds(month)
        result = [r["path"] for r in newest if r["mtime"][:7] == month]
        # -newermt is "strictly newer"; whole-second mtimes make `start - 1s` mean "at or after start".
        before = lambda t: (t - timedelta(seconds=1)).strftime("%Y-%m-%d %H:%M:%S UTC")  # noqa: E731
        sol = listing.format(test=f"-newermt '{before(start)}' ! -newermt '{before(end)}'")
        name = start.strftime("%B %Y")
        ask = [f"List the files under `{tree}` last modified during {name} (UTC), newest first, one per line, "
               f"{rel}, in `{out}`.",
               f"Which files in the tree `{tree}` have a modification time in {name} (UTC)? Write their {rel} to "
               f"`{out}`, most recently modified first."]
    else:
        k = ctx.choose("k", [3, 4, 5])
        result = [r["path"] for r in newest[:k]]
        sol = listing.format(test="").replace(f"cut -f 2- > {out}", f"head -n {k} | cut -f 2- > {out}")
        ask = [f"Write the {k} most recently modified files under `{tree}` to `{out}`, newest first, one per line "
               f"({rel}).",
               f"Which {k} files in the tree `{tree}` were modified last? List them newest first in `{out}`, {rel}."]
    return StepSpec(instructions=ask, solution=sol, expected=lines(result), output=out,
                    output_dataset=derived_list(ctx, result, "file paths"))


def permissions_audit(ctx: StepContext) -> StepSpec:
    recs, tree, out = ctx.dataset.records, ctx.path, ctx.out
    query = ctx.choose("query", ["world-writable", "fix-modes"])
    rel = f"relative to `{tree}`, no leading `./`"
    if query == "world-writable":
        result = sorted((r["path"] for r in recs if r["mode"] & 0o002), key=_c)
        sol = f"(cd {tree} && find . -type f -perm -0002 -printf '%P\\n') | LC_ALL=C sort > {out}"
        ask = [f"Audit `{tree}`: list every regular file that is world-writable (writable by others), one path "
               f"per line ({rel}), sorted in byte order, in `{out}`.",
               f"Which files under `{tree}` can be written by any user (the 'other' write bit)? Save their paths "
               f"({rel}) to `{out}`, C-locale sorted."]
        return StepSpec(instructions=ask, solution=sol, expected=lines(result), output=out,
                        output_dataset=derived_list(ctx, result, "file paths"))
    rows = sorted(((r["path"], r["mode"] & ~0o022) for r in recs), key=lambda p: _c(p[0]))
    result = [f"{mode:o} {path}" for path, mode in rows]
    sol = (f"find {tree} -type f -exec chmod go-w {{}} +\n"
           f"(cd {tree} && find . -type f -printf '%m %P\\n') | LC_ALL=C sort -t ' ' -k2 > {out}")
    ask = [f"Remove write permission for group and others from every regular file under `{tree}` (change no "
           f"other permission bit), then write `<mode> <path>` for every file to `{out}`: the mode in octal as "
           f"`stat -c %a` prints it, the path {rel}; sorted by path in byte order.",
           f"Tighten `{tree}`: no file may stay writable by its group or by others (other bits unchanged). Then "
           f"record each regular file's permissions as `<octal mode like stat %a> <path {rel}>` lines in `{out}`, "
           f"sorted by path (C locale)."]
    return StepSpec(instructions=ask, solution=sol, expected=lines(result), output=out)


def tree_checksums(ctx: StepContext) -> StepSpec:
    tree, out = ctx.path, ctx.out
    ext, hits = _pick_ext(ctx)
    bodies = ctx.dataset.extra["bodies"]
    result = [f"{hashlib.sha256(bodies[p]).hexdigest()}  {p}" for p in sorted((r["path"] for r in hits), key=_c)]
    sol = (f"(cd {tree} && find . -type f -name '*.{ext}' -printf '%P\\0' | LC_ALL=C sort -z | xargs -0 sha256sum) "
           f"> {out}")
    return StepSpec(
        instructions=[
            f"Compute the SHA-256 of every `*.{ext}` file anywhere under `{tree}` and write them to `{out}` in "
            f"`sha256sum` format (`<hex digest>  <path>`, two spaces), with paths relative to `{tree}` (no leading "
            f"`./`), sorted by path in byte order.",
            f"Make a checksum manifest of the `*.{ext}` files of `{tree}` (all subdirectories): `sha256sum` output "
            f"lines with paths relative to `{tree}` and no `./` prefix, ordered by path (LC_ALL=C), saved as "
            f"`{out}`.",
        ],
        solution=sol, expected=lines(result), output=out)


_TREE = frozenset({"tree"})
_ARCHIVE = frozenset({"archive"})
for skill in (
    Skill("tar-list", "list an archive's regular files or its largest members (tar -tv)", 3.0,
          "Peeking into a tarball before unpacking it is a common habit; telling files from directory and "
          "symlink entries needs the verbose listing.", _ARCHIVE, tar_list),
    Skill("tar-extract-member", "extract one member of a .tar.gz to stdout (tar -xO), naming it as stored", 3.0,
          "Pulling a single file out of a release or backup tarball is frequent; member names with a `./` or "
          "versioned top directory trip up many first attempts.", _ARCHIVE, tar_extract_member),
    Skill("tar-create", "archive a selection of files with relative names (find | tar --null -T -)", 3.5,
          "Creating tarballs is everyday ops work; archiving a filtered selection with clean member names "
          "(and a file name with a space) is the less routine part.", _TREE, tar_create),
    Skill("find-by-size", "find files above or below a size in bytes (find -size Nc)", 4.0,
          "Hunting large (or empty, or small) files is a classic disk-space chore; find's KiB rounding makes "
          "`-size -Nk` a well-known trap.", _TREE, find_by_size),
    Skill("find-by-mtime", "find files by modification time (find -newermt, %T@ sorting)", 3.0,
          "Asking what changed when is common in incident work; absolute date windows and newest-first "
          "ordering need -newermt or printf timestamps.", _TREE, find_by_mtime),
    Skill("permissions-audit", "audit or fix file modes (find -perm, chmod go-w, %a)", 2.5,
          "Permission audits (world-writable files) and fixes are standard hardening steps, done less often "
          "than searches; -perm -0002 versus /022 and symbolic chmod are the details that matter.",
          _TREE, permissions_audit),
    Skill("tree-checksums", "sha256 manifest of all files of one extension (find -print0 | xargs -0)", 2.5,
          "Checksum manifests for releases and backups are a periodic task; a file name with a space breaks "
          "plain xargs.", _TREE, tree_checksums),
):
    register_skill(skill)
