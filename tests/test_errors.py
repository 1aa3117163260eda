import dpsql
from dpsql import errors


def test_pep249_tree():
    assert issubclass(dpsql.InterfaceError, dpsql.Error)
    assert issubclass(dpsql.DatabaseError, dpsql.Error)
    for cls in (dpsql.DataError, dpsql.OperationalError, dpsql.IntegrityError,
                dpsql.InternalError, dpsql.ProgrammingError, dpsql.NotSupportedError):
        assert issubclass(cls, dpsql.DatabaseError)
    assert dpsql.apilevel == "2.0"
    assert dpsql.paramstyle == "qmark"
    assert dpsql.threadsafety in (0, 1, 2, 3)


def test_dp_classes_under_pep249_parents():
    for cls in (errors.UnsupportedQueryError, errors.UnsupportedConstructError,
                errors.MissingMetricError, errors.ProtectedBinError,
                errors.AggregateArithmeticError):
        assert issubclass(cls, dpsql.NotSupportedError)
    assert issubclass(errors.BudgetExhaustedError, dpsql.OperationalError)


def test_error_json_shape():
    e = errors.MissingMetricError("join key o.x has no max frequency")
    assert e.to_json() == {
        "error": {"type": "MissingMetricError", "message": "join key o.x has no max frequency"}
    }


def test_error_json_names_the_public_class_of_a_subclass():
    """A subclass an analysis raises (to carry its message's parts: dpsql.analysis.bounds; to
    be recognised: dpsql.units.refusals) is reported as the class of dpsql.errors it is."""
    import copy

    from dpsql.analysis.bounds import UnboundedAggregateValue
    from dpsql.units.refusals import NoCountedUnitError

    err = UnboundedAggregateValue("SUM(t.n)", "t", "n", summed=True)
    assert err.to_json()["error"] == {"type": "AggregateArithmeticError", "message": str(err)}
    assert NoCountedUnitError("x").to_json()["error"]["type"] == "UnsupportedConstructError"
    # it copies (and pickles) with its parts
    again = copy.copy(err)
    assert (again.construct, again.alias, again.column, str(again)) == (
        "SUM(t.n)", "t", "n", str(err))
