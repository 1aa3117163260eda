"""Privacy budgets: the persistent ledger, its audit log, analyst accounts, composition theorems
and the result cache.

docs/privacy.md section 5 and docs/design.md section 2. One SQLite file (WAL mode) holds, per
(database identity, analyst):

* the budget the data owner granted (``set_budget``),
* every charge ever made against it (who, when, query fingerprint, epsilon, delta, mechanism,
  SQL text, parameters, and the values it released), append-only: refunds and the owner's
  resets mark charges, never delete them (``audit``),
* the noisy answers already paid for (the cache), so a repeated query costs nothing and returns
  the same noise (averaging repeated answers is the classic attack on DP query systems);

and, per file, the analysts' accounts for server mode (SCRAM verifiers and the owner's policy).

Contract with the session (:class:`dpsql.session.Session`, the one caller that charges; the
reason this package exists):

1. ``cache_lookup`` first; a hit is recorded in the audit log (the request and the charge that
   paid for it) and released as is, at no cost.
2. Otherwise ``charge()`` BEFORE running the query. ``charge`` returns only after the charge is
   committed durably (``synchronous=FULL``), so a crash or SIGKILL after it returned cannot lose
   the charge, and a crash before it returned released nothing. If it raises, release nothing.
3. Run, add noise, ``record_release`` the values with the noisy payload for the cache, in one
   transaction (if that fails, withhold them: the charge stands), release.
4. ``refund()`` a charge only when nothing derived from its query was released (the query failed
   or was cancelled before its answer existed). A refund that does not commit leaves the charge
   in place: failing to refund can only overcharge, never underspend.

The ledger enforces each budget's filter, chosen by the owner (:mod:`~dpsql.accounting.filters`):
basic composition (sum of epsilons, sum of deltas) by default, which stays valid when the
analyst chooses each (epsilon, delta) adaptively (it is a valid privacy *filter*), or a Rényi,
zCDP or GDP (Gaussian releases only) filter over each release's privacy curve
(:mod:`~dpsql.accounting.curves`), also valid adaptively. The advanced
(Dwork-Rothblum-Vadhan) and optimal (Kairouz-Oh-Viswanath) bounds are computed for reporting
only: those theorems assume the sequence of parameters is fixed in advance; with adaptively chosen
parameters they need the filter versions of Rogers-Roth-Ullman-Vadhan (2016), which we do not
enforce.

Everything fails closed: an unreadable, corrupt, foreign or incomplete ledger file, or a lock held
longer than the timeout, raises :class:`dpsql.errors.OperationalError` naming the file; an analyst
without a budget may spend nothing.

Modules, one job each (standard library only, so ``dpsql budget`` starts fast; ``scramp`` is
imported only when a password is set):

* :mod:`~dpsql.accounting.units`: exact fixed-point epsilon and delta amounts;
* :mod:`~dpsql.accounting.schema`: the SQL schema (version 4) and the upgrades to it;
* :mod:`~dpsql.accounting.store`: the SQLite file, opening, upgrading, validation, transactions;
* :mod:`~dpsql.accounting.principal`: database identities, analyst keys, timestamps;
* :mod:`~dpsql.accounting.ledger`: :class:`Ledger` (budgets, charges, refunds, the cache);
* :mod:`~dpsql.accounting.audit`: the audit log (released values, :meth:`Ledger.audit`);
* :mod:`~dpsql.accounting.analysts`: analyst accounts and their policy;
* :mod:`~dpsql.accounting.composition`: the composition theorems and :func:`compose`;
* :mod:`~dpsql.accounting.status`: :class:`Charge` and :class:`BudgetStatus`;
* :mod:`~dpsql.accounting.filters`: the budget filters (basic, Rényi, zCDP, GDP);
* :mod:`~dpsql.accounting.curves`: a release's privacy curve from its noise plans;
* :mod:`~dpsql.accounting.renyi`: Rényi/zCDP divergences, conversions, pure filters.
"""

from __future__ import annotations

from dpsql.accounting.analysts import AnalystAccount
from dpsql.accounting.audit import AuditCharge, AuditEntry, AuditEvent, AuditReset
from dpsql.accounting.composition import (
    CompositionReport,
    PrivacyBound,
    advanced_composition,
    basic_composition,
    compose,
    kov_bound,
    kov_delta,
    optimal_homogeneous_composition,
)
from dpsql.accounting.ledger import BudgetStatus, Charge, Ledger, database_identity
from dpsql.accounting.units import DELTA_UNIT_EXPONENT, EPSILON_UNIT_EXPONENT, MAX_EPSILON

__all__ = [
    "DELTA_UNIT_EXPONENT",
    "EPSILON_UNIT_EXPONENT",
    "MAX_EPSILON",
    "AnalystAccount",
    "AuditCharge",
    "AuditEntry",
    "AuditEvent",
    "AuditReset",
    "BudgetStatus",
    "Charge",
    "CompositionReport",
    "Ledger",
    "PrivacyBound",
    "advanced_composition",
    "basic_composition",
    "compose",
    "database_identity",
    "kov_bound",
    "kov_delta",
    "optimal_homogeneous_composition",
]
