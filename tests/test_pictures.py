"""The pictures in the docs are what docs/pictures.py would make now: what
each was made from (the rows its page shows and its spec: the chart's
vega-lite, the page's metadata), computed again from the bundled examples
without a browser, hashes to what docs/pictures.json recorded when the
picture was taken, and each PNG is the one the script wrote. Pixels are not
compared. A failure says which picture is stale: run
`.venv/bin/python docs/pictures.py` and commit the pictures with
docs/pictures.json."""

import importlib.util
import json
import re

import pytest

from .readme_tour import REPO

DOCS = REPO / "docs"


def load_pictures():
    spec = importlib.util.spec_from_file_location("docs_pictures", DOCS / "pictures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pictures = load_pictures()
RECORDED = json.loads((DOCS / "pictures.json").read_text(encoding="utf-8"))
STALE = "is stale: run .venv/bin/python docs/pictures.py and commit docs/*.png with docs/pictures.json"


@pytest.fixture(scope="module")
def made_now(tmp_path_factory):
    with pictures.example_store(tmp_path_factory.mktemp("pictures")) as db_path:
        return pictures.made_from(db_path)


def test_every_picture_is_recorded():
    assert sorted(RECORDED) == sorted(picture.name for picture in pictures.PICTURES)
    for picture in pictures.PICTURES:
        assert RECORDED[picture.name]["page"] == picture.path, f"docs/{picture.name}.png {STALE}"


@pytest.mark.parametrize("picture", pictures.PICTURES, ids=lambda p: p.name)
def test_the_picture_was_made_from_what_its_page_shows_now(picture, made_now):
    assert pictures.digest(made_now[picture.name]) == RECORDED[picture.name]["made_from"], (
        f"docs/{picture.name}.png {STALE}"
    )


@pytest.mark.parametrize("picture", pictures.PICTURES, ids=lambda p: p.name)
def test_the_picture_is_the_one_the_script_wrote(picture):
    assert pictures.file_digest(DOCS / f"{picture.name}.png") == RECORDED[picture.name]["png"], (
        f"docs/{picture.name}.png is not the picture docs/pictures.py recorded: {STALE}"
    )


def test_a_changed_page_makes_its_picture_stale(made_now):
    """The check can fail: one row of the chart's data changed, or its spec, changes the hash."""
    chart = json.loads(json.dumps(made_now["chart"]))
    chart["data"]["ranges"][0]["effect"] = 2.0
    assert pictures.digest(chart) != RECORDED["chart"]["made_from"]
    chart = json.loads(json.dumps(made_now["chart"]))
    chart["spec"]["charts"]["ranges"]["display"]["height"] = 361
    assert pictures.digest(chart) != RECORDED["chart"]["made_from"]


def test_every_picture_the_docs_show_is_made_by_the_script():
    made = {f"{picture.name}.png" for picture in pictures.PICTURES}
    shown = set()
    for page in [REPO / "README.md", *DOCS.glob("*.md")]:
        for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)", page.read_text(encoding="utf-8")):
            path = (page.parent / target).resolve()
            assert path.parent == DOCS and path.name in made, (
                f"{page.name} shows {target}: not made by docs/pictures.py"
            )
            shown.add(path.name)
    assert shown, "the docs show no picture"
    assert {path.name for path in DOCS.glob("*.png")} == made, (
        "a picture under docs/ that docs/pictures.py does not make"
    )
