#!/usr/bin/env python3
"""Who includes, calls and writes what in src/: the include graph by folder
and by file, circles among the modules of one folder, and a crude listing
of which file writes which field of a folder's structs.

    tools/include_graph.py                       # every section, folders pipeline, source, cache, io
    tools/include_graph.py folders               # one line per folder: the folders it includes
    tools/include_graph.py files pipeline        # one line per file: what it includes
    tools/include_graph.py circles pipeline source cache
    tools/include_graph.py writes pipeline       # field -> files writing it, per struct
    tools/include_graph.py check pipeline source cache io  # exit 1 on a circle or a shared header

A module is a stem: X.c and X.h together. Module A uses module B when a file
of A includes B's header, or calls (names) a function or variable that a
file of B defines or declares static inline. A circle is a set of modules
of one folder that use each other round a loop (a strongly connected
component of more than one module). A header that declares functions
defined in several .c files (a "shared header") hides circles from the
include graph, so it is reported too, with the calls that cross it.

The writes listing is text matching, not a compiler: an assignment, ++/--,
op=, an atomic store or read-modify-write, or &field handed to a function
(marked '&', locks and waits left out) counts as a write of the last field
of the expression; the struct is found from the declared type of the
expression's variable in the enclosing function, else from the field's
name when one struct of the folder has it ('?' marks a guess). A write
into what a field points at (s->ok[j] = ...) is marked '[]'.
"""
import os
import re
import sys
from collections import defaultdict

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SRC = os.path.join(ROOT, "src")

# ---- reading C ----------------------------------------------------------------


def strip_c(text):
    """Comments and string/char literals blanked (lengths and newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else text[i:j])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def c_files(folder):
    d = os.path.join(SRC, folder)
    return sorted(f for f in os.listdir(d) if f.endswith((".c", ".h")))


def folders():
    return sorted(d for d in os.listdir(SRC) if os.path.isdir(os.path.join(SRC, d)))


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def includes(folder, name):
    return INCLUDE.findall(read(os.path.join(SRC, folder, name)))


def stem(name):
    return name.rsplit(".", 1)[0]


# ---- symbols: what each file defines and names ----------------------------------

DEF_RE = re.compile(
    r"^(?!static\b|typedef\b|extern\b|#|struct\b[^(]*;|enum\b)[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\(([^;{}]*)\)\s*\{",
    re.M)
INLINE_RE = re.compile(r"^static\s+inline\b[^;{(]*?\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*\{", re.M)
DECL_RE = re.compile(r"^(?!static\b|typedef\b|#)[A-Za-z_][\w \t\*]*?\b(sl_\w+)\s*\([^;{}]*\)\s*;", re.M)
VAR_DEF_RE = re.compile(r"^(?!static\b|typedef\b|extern\b|#)[A-Za-z_][\w \t\*]*?\b(sl__\w+)\s*(?:\[[^\]]*\])?\s*(?:=[^;]*)?;", re.M)
IDENT_RE = re.compile(r"\b(sl_\w+)\b")


def symbols(folder):
    """defs[file] = names defined there (functions, globals, static
    inlines of a header); decls[header] = functions it declares."""
    defs, decls, text = {}, {}, {}
    for f in c_files(folder):
        t = strip_c(read(os.path.join(SRC, folder, f)))
        text[f] = t
        names = set()
        if f.endswith(".c"):
            names |= {m.group(1) for m in DEF_RE.finditer(t)}
            names |= {m.group(1) for m in VAR_DEF_RE.finditer(t)}
        else:
            decls[f] = {m.group(1) for m in DECL_RE.finditer(t)}
        names |= {m.group(1) for m in INLINE_RE.finditer(t)}
        defs[f] = {n for n in names if n.startswith("sl_")}
    return defs, decls, text


def module_graph(folder):
    """edges[a][b] = reasons module a uses module b (includes, calls)."""
    defs, decls, text = symbols(folder)
    owner = {}
    for f, names in defs.items():
        for n in names:
            owner.setdefault(n, set()).add(stem(f))
    mods = sorted({stem(f) for f in defs})
    edges = {m: defaultdict(set) for m in mods}
    for f in defs:
        a = stem(f)
        for inc in includes(folder, f):
            if "/" in inc and inc.split("/")[0] == folder:
                b = stem(inc.split("/", 1)[1])
                if b != a and b in edges:
                    edges[a][b].add("includes " + inc)
        own = defs[f] | decls.get(f, set())  # a header's prototypes are not uses
        for n in set(IDENT_RE.findall(text[f])) - own:
            for b in owner.get(n, ()):
                if b != a:
                    edges[a][b].add("calls " + n)
    return mods, edges, defs, decls


def sccs(nodes, succ):
    """Tarjan: strongly connected components."""
    index, low, on, stack, out, k = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = k[0]
        k[0] += 1
        stack.append(v)
        on.add(v)
        for w in succ(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return out


def shared_headers(folder, defs, decls):
    """Headers declaring functions defined in more than one other module."""
    out = {}
    for h, names in decls.items():
        where = defaultdict(set)
        for f, d in defs.items():
            if f.endswith(".c"):
                for n in names & d:
                    where[stem(f)].add(n)
        others = {m for m in where if m != stem(h)}
        if len(others) > 1:
            out[h] = where
    return out


# ---- sections -----------------------------------------------------------------


def section_folders():
    print("== include graph by folder (folder: folders its files include, with counts)")
    for d in folders():
        cnt = defaultdict(int)
        for f in c_files(d):
            for inc in includes(d, f):
                top = inc.split("/")[0] if "/" in inc else "(" + inc + ")"
                if top != d:
                    cnt[top] += 1
        print("%-9s %s" % (d + ":", " ".join("%s(%d)" % kv for kv in sorted(cnt.items())) or "-"))
    print()


def section_files(folder):
    print("== include graph of src/%s by file (file: its includes within src/)" % folder)
    for f in c_files(folder):
        incs = [i for i in includes(folder, f) if "/" in i]
        print("%-14s %s" % (f + ":", " ".join(incs) or "-"))
    print()


def section_circles(folder):
    mods, edges, defs, decls = module_graph(folder)
    print("== src/%s: modules and what each uses (includes or calls)" % folder)
    for m in mods:
        print("%-11s %s" % (m + ":", " ".join(sorted(edges[m])) or "-"))
    comps = [c for c in sccs(mods, lambda v: sorted(edges[v])) if len(c) > 1]
    if comps:
        for c in comps:
            print("CIRCLE (%d modules): %s" % (len(c), " ".join(c)))
            for a in c:
                for b in sorted(edges[a]):
                    if b in c:
                        why = sorted(edges[a][b])
                        print("   %s -> %s: %s%s" % (a, b, ", ".join(why[:4]), " ..." if len(why) > 4 else ""))
    else:
        print("no circle among the modules of src/%s" % folder)
    sh = shared_headers(folder, defs, decls)
    for h, where in sorted(sh.items()):
        print("SHARED HEADER %s declares functions of %d modules: %s" % (
            h, len(where), ", ".join("%s(%d)" % (m, len(n)) for m, n in sorted(where.items()))))
    print()
    return comps, sh


# ---- writes -----------------------------------------------------------------

STRUCT_RE = re.compile(r"\b(typedef\s+)?struct(?:\s+(\w+))?\s*\{")
TYPEDEF_RE = re.compile(r"\btypedef\s+struct\s+(\w+)\s+(\w+)\s*;")


def struct_bodies(t):
    """(tag, alias, body) of each struct definition in stripped text t."""
    for m in STRUCT_RE.finditer(t):
        depth, i = 1, m.end()
        while i < len(t) and depth:
            depth += {"{": 1, "}": -1}.get(t[i], 0)
            i += 1
        body = t[m.end():i - 1]
        alias = None
        if m.group(1):
            a = re.match(r"\s*(\w+)\s*;", t[i:])
            alias = a.group(1) if a else None
        yield m.group(2) or alias, alias, body


def fields_of(body):
    """name -> (base type, pointer, array) of each member of a struct body."""
    out = {}
    flat, depth = [], 0
    for ch in body:  # nested struct/union bodies are dropped
        if ch == "{":
            depth += 1
            continue
        if ch == "}":
            depth -= 1
            continue
        if depth == 0:
            flat.append(ch)
    for decl in "".join(flat).split(";"):
        decl = " ".join(decl.split())
        if not decl or decl.startswith("#"):
            continue
        fp = re.match(r"(.*?)\(\s*\*\s*(\w+)\s*\)", decl)  # function pointer or pointer to array
        if fp:
            out[fp.group(2)] = (fp.group(1).split()[-1] if fp.group(1).split() else "?", True, False)
            continue
        m = re.match(r"((?:(?:const|volatile|_Atomic|unsigned|signed|struct|enum|long|short)\s+)*\w+)\s+(.*)", decl)
        if not m:
            continue
        base = m.group(1).split()[-1]
        for d in m.group(2).split(","):
            d = d.strip()
            ptr = d.startswith("*")
            name = re.match(r"\**\s*(\w+)", d)
            if name:
                out[name.group(1)] = (base, ptr, "[" in d)
    return out


def struct_table():
    """structs[tag] = fields, where[tag] = file, alias -> tag, for all of src/ and include/."""
    structs, where, alias = {}, {}, {}
    paths = [os.path.join(ROOT, "include", f) for f in os.listdir(os.path.join(ROOT, "include")) if f.endswith(".h")]
    for d in folders():
        paths += [os.path.join(SRC, d, f) for f in c_files(d)]
    for p in paths:
        t = strip_c(read(p))
        for m in TYPEDEF_RE.finditer(t):
            alias[m.group(2)] = m.group(1)
        for tag, al, body in struct_bodies(t):
            if tag and body.strip():
                structs[tag] = fields_of(body)
                where[tag] = os.path.relpath(p, ROOT)
                if al:
                    alias[al] = tag
    return structs, where, alias


NOT_WRITES = {"pthread_mutex_lock", "pthread_mutex_unlock", "pthread_cond_wait", "pthread_cond_timedwait",
              "pthread_cond_signal", "pthread_cond_broadcast", "atomic_load", "atomic_load_explicit",
              "pthread_join", "sizeof", "offsetof", "pthread_rwlock_rdlock", "pthread_rwlock_unlock",
              "if", "while", "for", "switch", "return"}
ATOMIC_WRITE = re.compile(r"^atomic_(store|fetch_\w+|exchange|compare_exchange\w*)")
INTO_FIRST = {"memset", "memcpy", "memmove", "snprintf", "sl__msg", "strcpy"}
CHAIN_RE = re.compile(r"\b([A-Za-z_]\w*)((?:\s*(?:->|\.)\s*[A-Za-z_]\w*|\s*\[[^\]\[]*(?:\[[^\]]*\][^\]\[]*)*\])+)")
WRITE_OP = re.compile(r"\s*(=(?!=)|\+=|-=|\*=|/=|%=|\|=|&=|\^=|<<=|>>=|\+\+|--)")
FUNC_HEAD = re.compile(r"^[A-Za-z_][^;]*?\b(\w+)\s*\(", re.M)
PROTO_RE = re.compile(r"\b(\w+)\s*\(([^;{}()]*(?:\([^()]*\)[^;{}()]*)*)\)\s*[;{]")


def prototypes():
    """name -> its parameters' texts, from every header and source file (the
    first seen wins: headers first)."""
    protos = {}
    paths = [os.path.join(ROOT, "include", f) for f in sorted(os.listdir(os.path.join(ROOT, "include")))]
    for d in folders():
        paths += [os.path.join(SRC, d, f) for f in c_files(d) if f.endswith(".h")]
    for d in folders():
        paths += [os.path.join(SRC, d, f) for f in c_files(d) if f.endswith(".c")]
    for p in paths:
        if not p.endswith((".c", ".h")):
            continue
        for m in PROTO_RE.finditer(strip_c(read(p))):
            if m.group(1) in ("if", "while", "for", "switch", "return", "sizeof"):
                continue
            protos.setdefault(m.group(1), [a.strip() for a in split_args(m.group(2))])
    return protos


def split_args(s):
    out, depth, cur = [], 0, []
    for ch in s:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


def enclosing_call(t, pos):
    """(function name, argument index) of the call whose argument starts at
    pos, or (None, None)."""
    depth, commas, i = 0, 0, pos - 1
    lo = max(0, pos - 2000)
    while i >= lo:
        ch = t[i]
        if ch in ")]}":
            depth += 1
        elif ch in "([{":
            if depth == 0:
                if ch != "(":
                    return None, None
                m = re.search(r"(\w+)\s*$", t[max(0, i - 80):i])
                return (m.group(1), commas) if m else (None, None)
            depth -= 1
        elif ch == ";" and depth == 0:
            return None, None
        elif ch == "," and depth == 0:
            commas += 1
        i -= 1
    return None, None


def func_starts(t):
    """Offsets of top-level function bodies' heads (column 0 headers)."""
    return [m.start() for m in FUNC_HEAD.finditer(t)]


def var_type(t, pos, starts, var, alias, structs):
    """Struct tag of variable var at pos (its declaration in the enclosing function)."""
    lo = 0
    for s in starts:
        if s <= pos:
            lo = s
        else:
            break
    scope = t[lo:pos]
    tags = set(alias) | set(structs)
    best = None
    for m in re.finditer(r"\b(?:struct\s+)?(\w+)\s*(\*?)\s*\b%s\b\s*(?=[=;,\)\[])" % re.escape(var), scope):
        ty = m.group(1)
        if ty in tags:
            best = alias.get(ty, ty)
    for m in re.finditer(r"\b(?:struct\s+)?(\w+)\s+\**\s*\w+(?:\s*=[^,;()]*)?\s*,\s*\**\s*%s\b" % re.escape(var), scope):
        if best is None and m.group(1) in tags:  # TYPE a, *var
            best = alias.get(m.group(1), m.group(1))
    if best is None:  # a file-scope variable
        for m in re.finditer(r"\b(?:struct\s+)?(\w+)\s*\*?\s*\b%s\b\s*(?=[=;,\)\[])" % re.escape(var), t[:lo]):
            if m.group(1) in tags:
                best = alias.get(m.group(1), m.group(1))
    return best


def owners(base_tag, steps, structs, alias):
    """The (tag, field, is_array) of each field the expression writes: its
    last field, and every field that embeds it by value (a '.' step)."""
    out, tag, chain = [], base_tag, []
    for kind, name in steps:
        if kind == "[":
            continue
        if tag is None or tag not in structs or name not in structs[tag]:
            return []
        chain.append((kind, tag, name))
        base, ptr, arr = structs[tag][name]
        nxt = alias.get(base, base)
        tag = nxt if nxt in structs else None
    if not chain:
        return []
    out.append(chain[-1][1:] + (structs[chain[-1][1]][chain[-1][2]][2],))
    for i in range(len(chain) - 1, 0, -1):  # x.a.b = ...: a is written too
        if chain[i][0] != ".":
            break
        out.append(chain[i - 1][1:] + (True,))
    return out


def parse_steps(rest):
    """[(op, field)] of an access chain's tail, ('[', '') for a subscript
    (whose contents are skipped)."""
    steps, i, depth, flat = [], 0, 0, []
    for ch in rest:
        if ch == "[":
            if depth == 0:
                flat.append("[")
            depth += 1
        elif ch == "]":
            depth -= 1
        elif depth == 0:
            flat.append(ch)
    for s in re.finditer(r"(->|\.)\s*([A-Za-z_]\w*)|\[", "".join(flat)):
        steps.append(("[", "") if s.group(0) == "[" else (s.group(1), s.group(2)))
    return steps


def alias_owners(t, pos, starts, var, alias, structs):
    """var = &x->f...: a write through var writes the embedded field f
    too (and what embeds it)."""
    lo = max([s for s in starts if s <= pos] or [0])
    m = None
    for m in re.finditer(r"\b%s\s*=\s*&\s*([A-Za-z_]\w*)((?:\s*(?:->|\.)\s*[A-Za-z_]\w*)+)\s*;" % re.escape(var),
                         t[lo:pos]):
        pass
    if not m:
        return []
    base = var_type(t, lo + m.start(1), starts, m.group(1), alias, structs)
    hits = owners(base, parse_steps(m.group(2)), structs, alias) if base else []
    return [(tag, fld, True) for tag, fld, _ in hits]


def chains(t):
    """Every access chain of t, those inside another's subscripts too."""
    todo = [(0, len(t))]
    while todo:
        lo, hi = todo.pop()
        for m in CHAIN_RE.finditer(t, lo, hi):
            yield m
            for sub in re.finditer(r"\[", t[m.start(2):m.end()]):
                todo.append((m.start(2) + sub.end(), m.end()))


def writes_in(folder, structs, alias, by_name, protos):
    """(tag, field, file, mark) for every write found in the folder's files."""
    out = []
    for f in c_files(folder):
        t = strip_c(read(os.path.join(SRC, folder, f)))
        starts = func_starts(t)
        for m in chains(t):
            var, rest = m.group(1), m.group(2)
            steps = parse_steps(rest)
            fields = [n for k, n in steps if k != "["]
            if not fields:
                continue
            elem = steps[-1][0] == "["
            after = t[m.end():m.end() + 4]
            before = t[max(0, m.start() - 8):m.start()].rstrip()
            mark = None
            if WRITE_OP.match(after) and not re.match(r"\s*==", after):
                mark = ""
            elif re.search(r"(\+\+|--)$", before):
                mark = ""
            elif before.endswith("&") and not before.endswith("&&"):
                fn, k = enclosing_call(t, len(before) + max(0, m.start() - 8) - 1)
                if fn and fn not in NOT_WRITES:
                    params = protos.get(fn)
                    const = params is not None and k < len(params) and params[k].startswith("const")
                    if ATOMIC_WRITE.match(fn):
                        mark = ""
                    elif not const:
                        mark = "&"
            else:
                fn, k = enclosing_call(t, m.start())
                if fn in INTO_FIRST and k == 0:
                    mark = "[]"
            if mark is None:
                continue
            base = var_type(t, m.start(), starts, var, alias, structs)
            hits = owners(base, steps, structs, alias) if base else []
            guess = ""
            if not hits and base:
                continue  # a struct of elsewhere (a public one, a local)
            if not hits:
                cands = by_name.get(fields[-1], [])
                if len(cands) != 1:
                    continue
                hits, guess = [(cands[0], fields[-1], structs[cands[0]][fields[-1]][2])], "?"
            hits += alias_owners(t, m.start(), starts, var, alias, structs)
            for n, (tag, fld, arr) in enumerate(hits):
                mk = mark
                if n == 0 and (elem or mk == "[]") and not arr:
                    mk = "[]"  # into what a pointer field points at
                elif mk == "[]":
                    mk = ""
                out.append((tag, fld, f, mk + guess))
    return out


def section_writes(folder):
    structs, where, alias = struct_table()
    mine = sorted(tag for tag, p in where.items() if p.startswith("src/%s/" % folder))
    by_name = defaultdict(list)
    for tag in mine:
        for fld in structs[tag]:
            by_name[fld].append(tag)
    found = defaultdict(lambda: defaultdict(set))
    for tag, fld, f, mark in writes_in(folder, structs, alias, by_name, prototypes()):
        if tag in mine:
            found[tag][fld].add(f + mark)
    print("== src/%s: which file writes which field (crude: see the head of tools/include_graph.py)" % folder)
    for tag in mine:
        flds = structs[tag]
        writers = set()
        for fld in flds:
            writers |= {re.sub(r"[\[\]&?]+$", "", w) for w in found[tag][fld]}
        multi = [fld for fld in flds if len({re.sub(r"[\[\]&?]+$", "", w) for w in found[tag][fld]}) > 1]
        print("struct %s (%s): %d fields, written from %d files%s" % (
            tag, where[tag], len(flds), len(writers),
            ("; %d fields from more than one file" % len(multi)) if multi else ""))
        for fld in flds:
            w = sorted(found[tag][fld])
            print("   %-18s %s" % (fld, " ".join(w) if w else "-"))
    print()


def main(argv):
    what = argv[1] if len(argv) > 1 else "all"
    which = argv[2:] or ["pipeline", "source", "cache", "io"]
    if what in ("folders", "all"):
        section_folders()
    if what in ("files", "all"):
        for d in which:
            section_files(d)
    bad = 0
    if what in ("circles", "all", "check"):
        for d in which:
            comps, sh = section_circles(d)
            bad += len(comps) + len(sh)
    if what in ("writes", "all"):
        for d in which:
            section_writes(d)
    if what == "check":
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
