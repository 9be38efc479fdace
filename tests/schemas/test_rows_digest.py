"""An artifact's rows digested as a multiset: the same rows however split and ordered give
one digest; another row, a row more or a row less give another."""

from realm.schemas.rows_digest import MODULUS, row_hash, rows_digest, rows_entry, rows_entry_of

COLUMNS = ["block_id", "title", "token_ids"]
ROWS = [
    {"block_id": 1, "title": "Apollo 11", "token_ids": [101, 2001, 102]},
    {"block_id": 2, "title": "Vostok 1", "token_ids": [101, 2002, 102]},
    {"block_id": 3, "title": "Gemini 4", "token_ids": []},
]


def entry(rows, columns=COLUMNS):
    return rows_entry_of(rows, columns)


def test_the_same_rows_in_other_files_and_orders_give_one_digest():
    one_file = rows_digest({"prepare": entry(ROWS)})
    assert rows_digest({"prepare": entry(ROWS[::-1])}) == one_file
    # Stages run one at a time write under other prefixes; the rows are what count.
    assert rows_digest({"chunk": entry(ROWS[:1]), "part": entry(ROWS[1:])}) == one_file
    assert row_hash(dict(reversed(list(ROWS[0].items()))), COLUMNS) == row_hash(ROWS[0], COLUMNS)


def test_another_row_a_repeated_row_or_another_column_change_the_digest():
    digest = rows_digest({"prepare": entry(ROWS)})
    edited = [ROWS[0], ROWS[1], {**ROWS[2], "title": "Gemini 5"}]
    assert rows_digest({"prepare": entry(edited)}) != digest
    assert rows_digest({"prepare": entry(ROWS + ROWS[:1])}) != digest
    assert rows_digest({"prepare": entry(ROWS[:2])}) != digest
    # A column a schema gained counts, even while null in every row.
    assert rows_digest({"prepare": entry(ROWS, [*COLUMNS, "url"])}) != digest


def test_an_entry_holds_the_count_and_the_sum_modulo_two_to_the_2048():
    assert entry([]) == {"count": 0, "sum": "0" * 512}
    total = sum(row_hash(row, COLUMNS) for row in ROWS)
    assert int(entry(ROWS)["sum"], 16) == total % MODULUS and entry(ROWS)["count"] == 3
    assert entry(ROWS) == rows_entry(3, total)
