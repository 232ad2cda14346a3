#!/usr/bin/python3
"""compare_runs.py A B RUN...: for each RUN (a run directory relative to A and to B), the journal
rows that do not depend on timing and the store files of A and B, compared; exit 1 on a difference.
Used by scripts/compare-runs."""
import sqlite3, sys, os, json, hashlib, re, glob
ROOTS = [os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])] if len(sys.argv) > 2 else ["", ""]
SKIP = re.compile(r"(time|_s$|seconds|pid|started|finished|host|_at$|log|path|dir|created|elapsed|rss|version|argv|config_json|samples_per_s|sps|wall|duration)", re.I)
def clean(v):
    if isinstance(v, str):
        v = v.replace(ROOTS[0], "ROOT").replace(ROOTS[1], "ROOT")
        if v[:1] in "{[":
            try:
                j = json.loads(v)
                if isinstance(j, dict):
                    j = {k: x for k, x in j.items() if not SKIP.search(k)}
                v = json.dumps(j, sort_keys=True)
            except ValueError:
                pass
    return v
def norm(row):
    return repr(tuple(clean(v) for v in row))
def journal(db):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    out = {}
    # Attempt ids and devices follow the order attempts started (timing); key them by member.
    key = {r[0]: (r[1], r[2], r[3]) for r in con.execute("select id, round, member, attempt from attempts")}
    out["epochs_by_member"] = ([], sorted(norm((key[r[0]],) + tuple(r[1:])) for r in
                               con.execute("select attempt_id, epoch, train_loss, val_loss, val_accuracy, lr from epochs")))
    for (t,) in con.execute("select name from sqlite_master where type='table'"):
        if t == "epochs":
            continue
        cols = [r[1] for r in con.execute(f"pragma table_info({t})")]
        keep = [c for c in cols if not SKIP.search(c) and c not in ("id", "device", "node", "config_fingerprint")]
        rows = con.execute(f"select {','.join(keep)} from {t}").fetchall() if keep else []
        out[t] = (keep, sorted(norm(r) for r in rows))
    return out
def store(d):
    out = {}
    for f in sorted(os.listdir(d)):
        p = os.path.join(d, f)
        if f.endswith(".npy"):
            out[f] = hashlib.sha256(open(p, "rb").read()).hexdigest()
        elif f.startswith("gen-") and f.endswith(".json"):
            txt = open(p).read().split("\n#crc32=")[0].replace(ROOTS[0], "ROOT").replace(ROOTS[1], "ROOT")
            j = json.loads(txt); j.pop("created", None); j.pop("origin", None); j.pop("created_at", None); j.pop("time", None)
            out[f] = json.dumps(j, sort_keys=True)
    return out
total_diff = 0
for run in sys.argv[3:]:
    a, b = os.path.join(sys.argv[1], run), os.path.join(sys.argv[2], run)
    ja, jb = journal(a + "/run.db"), journal(b + "/run.db")
    for t in ja:
        if ja[t] != jb.get(t):
            total_diff += 1
            ra, rb = set(ja[t][1]), set(jb.get(t, ([], []))[1])
            print(f"{run}: journal table {t} differs: {len(ra - rb)} rows only in A, {len(rb - ra)} only in B; e.g. {sorted(ra - rb)[:1]} vs {sorted(rb - ra)[:1]}")
    sa, sb = store(a + "/store"), store(b + "/store")
    diff = [k for k in set(sa) | set(sb) if sa.get(k) != sb.get(k)]
    total_diff += len(diff)
    nrows = sum(len(v[1]) for v in ja.values())
    print(f"{run}: {len(ja)} journal tables, {nrows} rows compared; store: {len(sa)} files ({sum(k.startswith('gen-') for k in sa)} generations), {len(diff)} differ {sorted(diff)[:3]}")
print("DIFFERENCES:", total_diff)
sys.exit(1 if total_diff else 0)
