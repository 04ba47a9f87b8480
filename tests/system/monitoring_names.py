#!/usr/bin/env python3
"""tests/system/monitoring_names.py METRICS_C DASHBOARD RULES [RULES_TEST]

Checks that the Grafana dashboard and the Prometheus rules (and the rules' unit tests) use only metrics and labels
that exist: the metric families src/daemon/metrics.c renders, with the labels it gives them. A metric renamed or
removed in metrics.c then fails this check until the dashboard and rules follow. Also checks that the dashboard is well-formed
(valid JSON, unique panel ids, every panel's queries non-empty), that rate()/increase() are applied to counters only,
and that every alert of the rules file has a unit test.

Prints each problem and exits 1, or prints a one-line summary and exits 0.
"""
import json
import re
import sys

import yaml  # python3-yaml (scripts/deps.sh)

METRIC = re.compile(r"\boplog2pg_[a-z0-9_]+\b")
# Prometheus's own labels and those the scrape adds.
SCRAPE_LABELS = {"instance", "job", "__name__"}


def metrics_c_families(text):
    """{name: (type, {labels})} of the families metrics.c renders."""
    fams = {}
    # family(f, "NAME", "TYPE", ...) and the helpers that call it: counter(f, "NAME", ...) and so on.
    for m in re.finditer(r'\bfamily\(\s*f,\s*"(oplog2pg_\w+)",\s*"(\w+)"', text):
        fams[m.group(1)] = (m.group(2), set())
    for helper, typ in (("counter", "counter"), ("counter_by", "counter"), ("gauge_u64", "gauge"),
                        ("gauge_i64", "gauge"), ("gauge_double", "gauge")):
        for m in re.finditer(r"\b" + helper + r'\(\s*f,\s*"(oplog2pg_\w+)"', text):
            fams[m.group(1)] = (typ, set())
    # Labels: counter_by(f, NAME, HELP, "LABEL", ...), sample_u64(f, NAME, "LABEL", ...), shard_sample (shard=),
    # and the info line (service=, version=).
    for m in re.finditer(r'\bcounter_by\(\s*f,\s*"(oplog2pg_\w+)",\s*"(?:[^"\\]|\\.)*",\s*"(\w+)"', text):
        fams[m.group(1)][1].add(m.group(2))
    for m in re.finditer(r'\bsample_u64\(\s*f,\s*"(oplog2pg_\w+)",\s*"(\w+)"', text):
        fams.setdefault(m.group(1), ("counter", set()))[1].add(m.group(2))
    for m in re.finditer(r'\bshard_sample\(\s*f,\s*"(oplog2pg_\w+)"', text):
        fams[m.group(1)][1].add("shard")
    info = re.search(r'fputs\("oplog2pg_info\{(\w+)=', text)
    if info and "oplog2pg_info" in fams:
        fams["oplog2pg_info"][1].add(info.group(1))
        for lab in re.findall(r'fputs\("\\",(\w+)=\\""', text):
            fams["oplog2pg_info"][1].add(lab)
    return fams


def exprs_of_dashboard(dash, problems):
    out = []  # (where, expr, legend)
    ids = set()

    def walk(panels):
        for p in panels:
            if p.get("type") == "row":
                walk(p.get("panels", []))
                continue
            where = "panel %r" % p.get("title")
            if p.get("id") in ids:
                problems.append("%s: panel id %s is used twice" % (where, p.get("id")))
            ids.add(p.get("id"))
            if "gridPos" not in p:
                problems.append("%s: no gridPos" % where)
            targets = p.get("targets") or []
            if not targets:
                problems.append("%s: no queries" % where)
            for t in targets:
                if not (t.get("expr") or "").strip():
                    problems.append("%s: an empty query (refId %s)" % (where, t.get("refId")))
                out.append((where, t.get("expr") or "", t.get("legendFormat") or ""))

    walk(dash.get("panels", []))
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        if v.get("type") == "query":
            out.append(("variable %r" % v.get("name"), q or "", ""))
    return out


def labels_in_expr(expr):
    labs = set()
    for body in re.findall(r"\{([^}]*)\}", expr):
        labs.update(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", body))
    for grp in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr):
        labs.update(x.strip() for x in grp.split(",") if x.strip())
    for m in re.finditer(r"label_values\(\s*(?:[^,()]*\{[^}]*\}|[^,()]*)\s*,\s*(\w+)\s*\)", expr):
        labs.add(m.group(1))
    return labs


def main(argv):
    metrics_c, dashboard, rules = argv[1:4]
    rules_test = argv[4] if len(argv) > 4 else None
    problems = []
    fams = metrics_c_families(open(metrics_c).read())
    if len(fams) < 20:
        print("monitoring: found only %d metric families in %s: the parser no longer reads it" % (len(fams), metrics_c))
        return 1

    def check_expr(where, expr, legend=""):
        names = set(METRIC.findall(expr))
        for n in sorted(names):
            if n not in fams:
                problems.append("%s: %s is not a metric of %s (in: %s)" % (where, n, metrics_c, expr))
        for m in re.finditer(r"\b(rate|irate|increase)\(\s*(oplog2pg_\w+)", expr):
            f = fams.get(m.group(2))
            if f and f[0] != "counter":
                problems.append("%s: %s() of %s, a %s" % (where, m.group(1), m.group(2), f[0]))
        known = set(SCRAPE_LABELS)
        for n in names:
            if n in fams:
                known |= fams[n][1]
        used = labels_in_expr(expr) | set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
        for lab in sorted(used - known):
            problems.append("%s: label %r is not one of %s's (%s) (in: %s)" %
                            (where, lab, "/".join(sorted(names)) or "?", ", ".join(sorted(known)), expr))
        return names

    try:
        dash = json.load(open(dashboard))
    except ValueError as e:
        print("monitoring: %s is not valid JSON: %s" % (dashboard, e))
        return 1
    used = set()
    for where, expr, legend in exprs_of_dashboard(dash, problems):
        used |= check_expr("%s %s" % (dashboard, where), expr, legend)

    doc = yaml.safe_load(open(rules))
    alerts = []
    for g in doc.get("groups", []):
        for r in g.get("rules", []):
            where = "%s %s" % (rules, r.get("alert") or r.get("record"))
            names = check_expr(where, r.get("expr", ""))
            used |= names
            if r.get("alert"):
                alerts.append(r["alert"])
                # {{ $labels.X }} in annotations: X must be a label the expression's series carry.
                known = set(SCRAPE_LABELS)
                for n in names:
                    known |= fams.get(n, ("", set()))[1]
                for text in (r.get("annotations") or {}).values():
                    for lab in re.findall(r"\$labels\.(\w+)", text):
                        if lab not in known:
                            problems.append("%s: annotation names $labels.%s, which %s lacks" %
                                            (where, lab, "/".join(sorted(names))))

    if rules_test:
        tdoc = yaml.safe_load(open(rules_test))
        tested = set()
        for t in tdoc.get("tests", []):
            for s in t.get("input_series", []):
                check_expr("%s series" % rules_test, s.get("series", "").split("{")[0],
                           "")
            for a in t.get("alert_rule_test", []):
                tested.add(a.get("alertname"))
        for a in alerts:
            if a not in tested:
                problems.append("%s: the alert %s has no test" % (rules_test, a))

    if problems:
        for p in problems:
            print("monitoring: " + p)
        return 1
    print("monitoring: %d metric names used by the dashboard and the rules, all in %s (%d families); "
          "%d alerts, each tested" % (len(used), metrics_c, len(fams), len(alerts)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
