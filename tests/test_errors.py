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
