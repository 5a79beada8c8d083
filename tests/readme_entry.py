"""The README's "Add a topic in four steps", followed as a newcomer does: its folder, `v1.avsc` and `topic.yaml`,
copied as the README writes them into a catalog.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from tests.constants import REPO


def write_readme_entry(catalog: Path) -> Path:
    """Writes the README's example entry into `catalog` (its folder as step 1 names it); returns its `topic.yaml`."""
    readme = (REPO / "README.md").read_text()
    steps = readme[readme.index("## Add a topic in four steps"):]
    steps = steps[:steps.index("\n## ", 1)]
    folder = re.search(r"`schema_catalog/([a-z0-9_]+)/([a-z0-9_]+)/`", steps)
    schema = re.search(r"```json\n(.*?)```", steps, re.S)
    entry = re.search(r"```yaml\n(.*?)```", steps, re.S)
    assert folder and schema and entry, "the four steps name a folder and give a v1.avsc and a topic.yaml"
    target = catalog / folder[1] / folder[2]
    target.mkdir(parents=True, exist_ok=True)  # a clone where the newcomer added it already
    (target / "v1.avsc").write_text(textwrap.dedent(schema[1]))
    (target / "topic.yaml").write_text(textwrap.dedent(entry[1]))
    return target / "topic.yaml"
