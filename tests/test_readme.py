"""The README's supported-ops table is the one the registries generate (never edited by hand)."""

from __future__ import annotations

from pathlib import Path

from edgekit.docs_gen import BEGIN, END, RECIPES_BEGIN, RECIPES_END, recipes_table, supported_ops_table

README = Path(__file__).resolve().parents[1] / "README.md"


def test_supported_ops_table_is_generated():
    text = README.read_text()
    assert BEGIN in text and END in text
    current = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert current == supported_ops_table(), "run: python -m edgekit.docs_gen --readme README.md"


def test_recipes_table_is_generated():
    text = README.read_text()
    assert RECIPES_BEGIN in text and RECIPES_END in text
    current = text.split(RECIPES_BEGIN, 1)[1].split(RECIPES_END, 1)[0].strip()
    assert current == recipes_table(), "run: python -m edgekit.docs_gen --readme README.md"


def test_readme_keeps_the_two_setup_commands():
    text = README.read_text()
    assert 'pip install -e ".[dev]" && python examples/digits/run.py' in text
    assert "python -m pytest" in text
