"""Rebuild ``smartnoise_suite.json`` from a checkout of opendp/smartnoise-sdk (not run by the
benchmarks; kept so the gathering can be checked and redone at another commit).

    python -m benchmarks.smartnoise_suite_build /path/to/smartnoise-sdk [COMMIT]

Gathers (see the JSON's ``gathered_from``): the query lists ``sql/tests/query/queries/
validate_pums/*.sql`` and every string literal of ``sql/tests/**/*.py`` that is a SELECT
naming a PUMS table; f-strings over ``PUMS.{tablename}`` are expanded for the 1,000-row PUMS
tables. Queries on PUMS_large / PUMS_null (whose data are not in the snapshot), the data-loading
script and an AST-only test naming columns PUMS lacks are listed under ``excluded``.
"""
# ruff: noqa
import ast
import json
import pathlib
import re
import subprocess
import sys

CHECKOUT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
ROOT = CHECKOUT / "sql" / "tests"
# the commit: the checkout's HEAD, or the second argument for an exported tree (git archive)
COMMIT = sys.argv[2] if len(sys.argv) > 2 else subprocess.run(
    ["git", "-C", str(CHECKOUT), "rev-parse", "HEAD"], capture_output=True, text=True,
    check=False).stdout.strip()
OUT = pathlib.Path(__file__).resolve().parent / "smartnoise_suite.json"
items = {}   # normalized text -> entry
excluded = []
def add(sql, origin, expected=None):
    sql = ' '.join(sql.split()).rstrip(';').strip()
    e = items.setdefault(sql, {'sql': sql, 'origins': []})
    e['origins'].append(origin)
    if expected: e['smartnoise_expects'] = expected
# 1. the validate_pums SQL lists
for fname, exp_ in (('validate_pums.sql', 'valid'), ('validate_pums_fail.sql', 'invalid')):
    p = ROOT / 'query/queries/validate_pums' / fname
    lines = [l for l in p.read_text().splitlines() if l.strip() and not l.strip().startswith('--')]
    for i, q in enumerate(' '.join(lines).split(';')):
        if q.strip():
            add(q, f'sql/tests/query/queries/validate_pums/{fname} #{i+1}', exp_)
# 2. string literals in the pytest files
SKIP_FILES = {'setup/dataloader/make_sqlite.py': 'a data-loading script, not a test'}
for p in sorted(ROOT.rglob('*.py')):
    rel = str(p.relative_to(ROOT))
    tree = ast.parse(p.read_text())
    for node in ast.walk(tree):
        s = None
        if isinstance(node, ast.JoinedStr):
            s = ast.unparse(node)
            if 'tablename' in s and re.match(r"f['\"]\s*select", s, re.I):
                body = ' '.join(s[2:-1].split())
                for t in ('PUMS',):
                    add(body.replace('{tablename}', t), f'sql/tests/{rel}:{node.lineno} (tablename {t})')
                excluded.append({'sql': body.replace('{tablename}', 'PUMS_large'), 'origin': f'sql/tests/{rel}:{node.lineno}', 'reason': 'PUMS_large: its data file is not stored with the repository snapshot (Git LFS), so it cannot be run here'})
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            s = node.value
        if s is None or not re.search(r'\bselect\b', s, re.I) or not re.search('pums', s, re.I):
            continue
        if s.rstrip().endswith('PUMS.'):  # the literal head of an f-string, handled above
            continue
        origin = f'sql/tests/{rel}:{node.lineno}'
        if rel in SKIP_FILES:
            excluded.append({'sql': ' '.join(s.split()), 'origin': origin, 'reason': SKIP_FILES[rel]}); continue
        if re.search('pums_null', s, re.I):
            excluded.append({'sql': ' '.join(s.split()), 'origin': origin, 'reason': 'PUMS_null: its data file is not stored with the repository snapshot'}); continue
        if 'start_date' in s:
            excluded.append({'sql': ' '.join(s.split()), 'origin': origin, 'reason': 'names columns PUMS does not have (start_date, sales): an AST-only ORDER BY test'}); continue
        add(s, origin)
seen = {}
for e in excluded:
    k = (e['sql'], e['reason'])
    if k in seen: seen[k]['origins'].append(e['origin'])
    else: seen[k] = {'sql': e['sql'], 'origins': [e['origin']], 'reason': e['reason']}
excluded = list(seen.values())
qs = list(items.values())
for i, q in enumerate(qs):
    q['id'] = f'SN{i+1:03d}'
    q['origins'].sort()
out = {
  'source': 'opendp/smartnoise-sdk',
  'commit': COMMIT,
  'gathered_from': 'sql/tests: the query lists query/queries/validate_pums/*.sql (SmartNoise expects validate_pums.sql to pass its validator and validate_pums_fail.sql to fail it) and every string literal of the pytest files that is a SELECT naming a PUMS table (f-strings over PUMS.{tablename} expanded for the 1,000-row PUMS tables). Texts are deduplicated after collapsing white space; origins lists every place a text occurs.',
  'queries': [{'id': q['id'], 'sql': q['sql'], **({'smartnoise_expects': q['smartnoise_expects']} if 'smartnoise_expects' in q else {}), 'origins': q['origins']} for q in qs],
  'excluded': excluded,
}
OUT.write_text(json.dumps(out, indent=1) + '\n')
print(len(qs), len(excluded))
