#!/usr/bin/env python3
"""docs_check: the docs cannot drift from the headers where a machine can tell.

Run by test/docs_test.sh as `docs_check.py ROOT [CHECK...]`: the named
checks only, or all of them without a name. Checks:

  names     every TERN_* name docs/*.md uses exists: TERN_CANCEL_*,
            TERN_REFUSED_* and every other public-looking name in the
            public headers (include/), a TERN__* name in the sources
            (runtime/, pool/, backends/), and the rest (environment
            variables, build macros) somewhere in the tree outside docs/.
            A name written as a family ("TERN_EAI_*", "TERN_HAVE_") needs
            one member.
  returns   every negative errno a header comment's "Returns:" promises
            for a function appears in that function's section of
            docs/api.md, and every errno the section's **Returns** names
            is in the header comment (unless the comment defers to another
            function: "as tern_submit").
  numbering the numbered sections of a doc ("## 3. ...") count 1, 2, 3...
  snippets  every fenced ```c block in docs/*.md compiles against the
            headers (cc -fsyntax-only, with the usual libc headers and
            tern.h included first, and the warnings that GCC 14 makes
            errors made errors here): as written, or else as the body of
            a function. A block that is deliberately partial (an excerpt
            with "..." in it) is marked on the line before its fence with
                <!-- docs_test: fragment of docs/examples/<file>.c -->
            naming the example it is cut from; the example must exist
            (and is compiled by the build). A block shown as the whole of
            an example, marked
                <!-- docs_test: all of docs/examples/<file>.c -->
            must be that file exactly.
  libuv     docs/from-libuv.md is a map of rows "libuv | tern | notes";
            every tern_* name it uses is declared in the public headers,
            and a row whose tern column is "absent" fails when a libuv
            call it names has a declared counterpart: the same words
            under the tern subject of the call's libuv family (uv_udp_send:
            tern_udp_send; uv_fs_event_start: tern_watch_start), a call of
            no family under any subject (uv_walk: tern_loop_walk), a few
            renamed calls (uv_queue_work: tern_submit), and a whole family
            written uv_x_t or uv_x_* when any call of its subject exists.
            One other table is allowed, the platform table, whose header
            is "libuv area | Linux | BSD, macOS | Windows": its rows have
            those four cells, and their tern_* names are held to the
            headers the same way.

Prints one line per failure and closes with "N passed, N failed".
"""
import concurrent.futures
import glob
import os
import re
import subprocess
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
headers = [os.path.join(root, "include", "tern.h")] + sorted(glob.glob(os.path.join(root, "include", "tern", "*.h")))
docs = sorted(glob.glob(os.path.join(root, "docs", "*.md")))
api_path = os.path.join(root, "docs", "api.md")

passed = 0
failed = 0


def ok():
    global passed
    passed += 1


def fail(msg):
    global failed
    failed += 1
    print("FAIL: " + msg)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def rel(path):
    return os.path.relpath(path, root)


# ---------------------------------------------------------------- names

def tree_text(dirs, exts):
    out = []
    for d in dirs:
        base = os.path.join(root, d)
        if os.path.isfile(base):
            out.append(read(base))
            continue
        for dirpath, _, files in os.walk(base):
            for name in files:
                if name.endswith(exts):
                    out.append(read(os.path.join(dirpath, name)))
    return "\n".join(out)


header_text = "\n".join(read(h) for h in headers)
source_text = tree_text(["runtime", "pool", "backends"], (".c", ".h"))
other_text = tree_text(["runtime", "pool", "backends", "test", "bench", "include", "meson.build",
                        "meson_options.txt", ".ci", "docs/examples", "abi"],
                       (".c", ".h", ".sh", ".py", ".txt", ".build", "test", "run", ".map"))

# Public-looking names must be in include/; these families always are.
PUBLIC = re.compile(r"TERN_(CANCEL|REFUSED|POOL|LOOP|BOUNDED|LONG|EAI|FS|TCP|STREAM|GROUP|SIGNAL|IO|READ|WRITE)(_|$)")


def exists(name, text):
    if name.endswith("_"):  # a family: one member will do
        return re.search(r"\b" + re.escape(name) + r"[A-Z0-9]", text) is not None
    return re.search(r"\b" + re.escape(name) + r"\b", text) is not None


def check_names():
    found = 0
    for doc in docs:
        text = read(doc)
        seen = set()
        for m in re.finditer(r"\bTERN_[A-Z0-9_]*[A-Z0-9_]", text):
            name = m.group(0)
            if name.endswith("__"):
                name = name.rstrip("_") + "_"
            if name in seen:
                continue
            seen.add(name)
            found += 1
            if name.startswith("TERN__"):
                where, text_in = "runtime/, pool/ or backends/", source_text
            elif PUBLIC.match(name):
                where, text_in = "the public headers", header_text
            else:
                where, text_in = "the sources", other_text
            if exists(name, text_in):
                ok()
            else:
                fail(f"{rel(doc)} names {name}, which {where} do not define")

    if found < 30:
        fail(f"found only {found} TERN_* names in docs/: the extraction is broken")

# ------------------------------------------------------------ numbering

# Numbered sections ("## 3. ...") of a doc count 1, 2, 3, ... once each.
def check_numbering():
    for doc in docs:
        numbers = [int(n) for n in re.findall(r"^## ([0-9]+)\. ", read(doc), re.M)]
        if numbers == list(range(1, len(numbers) + 1)):
            ok()
        else:
            fail(f"{rel(doc)}: numbered sections go {numbers}, not 1..{len(numbers)} once each")

# -------------------------------------------------------------- returns

def check_returns():
    api = read(api_path)
    headings = [(m.start(), m.group(1)) for m in re.finditer(r"^#{2,4} (.*)$", api, re.M)]

    def api_section(name):
        parts = []
        pat = re.compile(r"(^|[^a-z0-9_])" + re.escape(name) + r"([^a-z0-9_]|$)")
        for k, (pos, title) in enumerate(headings):
            if pat.search(title):
                end = headings[k + 1][0] if k + 1 < len(headings) else len(api)
                parts.append(api[pos:end])
        return "\n".join(parts)

    ERRNO = re.compile(r"-E[A-Z0-9]+\b")
    checked = 0
    for h in headers:
        text = read(h)
        for m in re.finditer(r"/\*((?:(?!\*/).)*?)\*/\s*((?:TERN_EXTERN[^;]*;\s*)+)", text, re.S):
            comment, decls = m.group(1), m.group(2)
            r = re.search(r"Returns:(.*?)(?:\n\s*\*\s*(?:Ownership|Threads|Requires|Hazard)\b|$)",
                          comment, re.S)
            if r is None:
                continue
            promised = set(ERRNO.findall(r.group(1)))
            defers = re.search(r"\bas (above|tern_[a-z0-9_]+)", r.group(1)) is not None
            for name in re.findall(r"(tern_[a-z0-9_]+)\s*\(", decls):
                section = api_section(name)
                if not section:
                    continue  # docs_test.sh reports a function without a heading
                for e in sorted(promised):
                    checked += 1
                    if e in section:
                        ok()
                    else:
                        fail(f"{rel(h)}: {name} returns {e}, which its section of docs/api.md "
                             "does not say")
                if defers:
                    continue
                ret = re.search(r"\*\*Returns:?\*\*(.*?)(?:\*\*[A-Z][a-z]+:?\*\*|$)", section, re.S)
                if ret is None:
                    continue
                for e in sorted(set(ERRNO.findall(ret.group(1))) - set(ERRNO.findall(comment))):
                    fail(f"docs/api.md: {name} returns {e}, which the comment in {rel(h)} "
                         "does not say")
    if checked < 60:
        fail(f"checked only {checked} promised return values: the extraction is broken")

# ------------------------------------------------------------- snippets

PRELUDE = "".join(f"#include <{h}>\n" for h in
                  ["errno.h", "netdb.h", "poll.h", "pthread.h", "signal.h", "stdbool.h", "stddef.h",
                   "stdint.h", "stdio.h", "stdlib.h", "string.h", "unistd.h", "tern.h"])
CC = os.environ.get("CC", "cc").split()
FLAGS = ["-std=c11", "-D_GNU_SOURCE", "-I" + os.path.join(root, "include"), "-fsyntax-only",
         "-Werror=implicit-function-declaration", "-Werror=incompatible-pointer-types",
         "-Werror=int-conversion", "-Werror=implicit-int", "-Werror=return-type", "-x", "c", "-"]
MARK = re.compile(r"<!--\s*docs_test:\s*fragment of (docs/examples/[A-Za-z0-9_/]+\.c)\s*-->")
# A block marked as the whole of an example must be that file, byte for byte
# (and compiles like any other block).
WHOLE = re.compile(r"<!--\s*docs_test:\s*all of (docs/examples/[A-Za-z0-9_/]+\.c)\s*-->")


def compiles(source):
    r = subprocess.run(CC + FLAGS, input=source, capture_output=True, text=True)
    return r.returncode == 0, r.stderr


def check_block(doc, start, code):
    """Compile one block: None when it compiles, else the first errors."""
    line = f'#line {start + 2} "{rel(doc)}"\n'
    good, err = compiles(PRELUDE + line + code + "\n")
    if not good:
        good, _ = compiles(PRELUDE + "void docs_snippet(void);\nvoid docs_snippet(void)\n{\n"
                           + line + code + "\n}\n")
    return None if good else "\n".join(l for l in err.splitlines() if "error" in l)[:600]


def check_snippets():
    blocks = []
    for doc in docs:
        lines = read(doc).split("\n")
        i = 0
        while i < len(lines):
            if lines[i].strip() != "```c":
                i += 1
                continue
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            where = f"{rel(doc)}:{i + 1}"
            mark = MARK.search(lines[i - 1]) if i > 0 else None
            whole = WHOLE.search(lines[i - 1]) if i > 0 else None
            if whole is not None:
                path = os.path.join(root, whole.group(1))
                if not os.path.isfile(path):
                    fail(f"{where}: shows all of {whole.group(1)}, which does not exist")
                elif read(path) != "\n".join(lines[i + 1:j]) + "\n":
                    fail(f"{where}: the listing differs from {whole.group(1)}: copy the file "
                         f"into the block again")
                else:
                    ok()
            if mark is not None:
                if os.path.isfile(os.path.join(root, mark.group(1))):
                    ok()
                else:
                    fail(f"{where}: a fragment of {mark.group(1)}, which does not exist")
            else:
                blocks.append((where, doc, i, "\n".join(lines[i + 1:j])))
            i = j + 1
    # Two compilers at a time: the blocks are independent.
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda b: check_block(b[1], b[2], b[3]), blocks))
    for (where, _, _, _), err in zip(blocks, results):
        if err is None:
            ok()
        else:
            fail(f"{where}: the C block does not compile against the headers "
                 f"(mark a deliberate excerpt as a fragment):\n{err}")
    if len(blocks) < 50:
        fail(f"found only {len(blocks)} C blocks in docs/: the extraction is broken")

# ---------------------------------------------------------------- libuv

LIBUV_DOC = os.path.join(root, "docs", "from-libuv.md")
ABSENT = "absent"
MAP_HEADER = ["libuv", "tern", "notes"]
PLATFORM_HEADER = ["libuv area", "Linux", "BSD, macOS", "Windows"]

# libuv's name families and the subject tern files the same things under:
# uv_udp_send's counterpart would be tern_udp_send, uv_fs_event_start's
# tern_watch_start. A family not listed keeps its own word (uv_thread_*
# would be tern_thread_*).
UV_FAMILIES = {"fs_event": "watch", "fs_poll": "watch", "prepare": "hook", "check": "hook",
               "idle": "hook", "async": "post", "poll": "io", "pipe": "unix", "process": "process",
               "signal": "signal", "stream": "stream", "timer": "timer", "loop": "loop",
               "tcp": "tcp", "udp": "udp", "tty": "tty", "fs": "fs", "handle": "handle"}
# Calls whose counterpart tern names after what it does rather than after
# libuv's word.
UV_RENAMES = {"uv_queue_work": "tern_submit", "uv_getaddrinfo": "tern_resolve",
              "uv_getnameinfo": "tern_resolve_addr", "uv_async_send": "tern_post",
              "uv_fileno": "tern_stream_fd", "uv_pipe_bind": "tern_unix_listen",
              "uv_fs_scandir": "tern_fs_list", "uv_fs_copyfile": "tern_fs_copy_range",
              "uv_write2": "tern_unix_write_fds", "uv_print_active_handles": "tern_loop_print_live"}


def declared_names():
    """Every tern_* identifier the headers' code (comments dropped) declares."""
    code = re.sub(r"/\*.*?\*/|//[^\n]*", " ", header_text, flags=re.S)
    return set(re.findall(r"\btern_[a-z0-9_]*[a-z0-9]", code))


def tern_counterparts(uv, declared):
    """The declared tern names a libuv name (a call, or a family written
    uv_x_t or uv_x_*) would map to; empty when tern has none."""
    subjects = {n.split("_")[1] for n in declared}
    if uv.endswith(("_t", "_*")):
        word = uv[len("uv_"):-2]
        prefix = "tern_" + UV_FAMILIES.get(word, word)
        return sorted(n for n in declared if n == prefix or n.startswith(prefix + "_"))
    wanted = set()
    if uv in UV_RENAMES:
        wanted.add(UV_RENAMES[uv])
    family = max((f for f in UV_FAMILIES if uv.startswith(f"uv_{f}_")), key=len, default=None)
    if family is not None:
        wanted.add(f"tern_{UV_FAMILIES[family]}_{uv[len(f'uv_{family}_'):]}")
    else:
        # A call of no family (uv_walk, uv_spawn, uv_try_write): the same
        # word under any of tern's subjects (tern_loop_walk, ...).
        rest = uv[len("uv_"):]
        wanted.add("tern_" + rest)
        wanted.update(f"tern_{s}_{rest}" for s in subjects)
    return sorted(wanted & declared)


def check_libuv():
    """docs/from-libuv.md: three columns a row (four in the platform
    table), every tern_* name declared, and nothing marked absent that the
    headers provide."""
    if not os.path.isfile(LIBUV_DOC):
        fail("docs/from-libuv.md is missing")
        return
    declared = declared_names()
    if len(declared) < 100:
        fail(f"found only {len(declared)} tern_* names in the headers: the extraction is broken")
        return
    where_doc = rel(LIBUV_DOC)
    rows = absent = 0
    platform = False  # inside the platform table: from its header to the next non-row
    for n, line in enumerate(read(LIBUV_DOC).split("\n"), 1):
        for name in sorted(set(re.findall(r"\btern_[a-z0-9_]*[a-z0-9_*]", line))):
            if name.endswith("_*"):
                good = any(d.startswith(name[:-1]) for d in declared)
            else:
                good = name in declared
            if good:
                ok()
            else:
                fail(f"{where_doc}:{n}: {name} is not declared in the public headers")
        if not line.startswith("|"):
            platform = False
            continue
        if re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", line):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells == PLATFORM_HEADER:
            platform = True
            continue
        if platform:
            if len(cells) == len(PLATFORM_HEADER):
                ok()
            else:
                fail(f"{where_doc}:{n}: a platform row of {len(cells)} cells, not 4 "
                     "(libuv area | Linux | BSD, macOS | Windows)")
            continue
        if len(cells) != 3:
            fail(f"{where_doc}:{n}: a row of {len(cells)} cells, not 3 "
                 "(libuv | tern | notes)")
            continue
        if cells == MAP_HEADER:
            continue
        rows += 1
        ok()
        if cells[1] != ABSENT:
            continue
        absent += 1
        for uv in re.findall(r"`(uv_[a-z0-9_]*[a-z0-9_*])", cells[0]):
            have = tern_counterparts(uv, declared)
            if have:
                fail(f"{where_doc}:{n}: {uv} is marked absent, but the headers declare "
                     f"{', '.join(have[:4])}")
            else:
                ok()
    if rows < 60 or absent < 10:
        fail(f"found only {rows} rows, {absent} absent, in {where_doc}: the extraction is broken")


CHECKS = {"names": check_names, "numbering": check_numbering, "returns": check_returns,
          "snippets": check_snippets, "libuv": check_libuv}
for wanted in sys.argv[2:] or list(CHECKS):
    if wanted in CHECKS:
        CHECKS[wanted]()
    else:
        fail(f"no check named {wanted} (there are {', '.join(CHECKS)})")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
