"""Sphinx configuration of the plag_ros documentation (``make docs``).

Sphinx rather than MkDocs: the package's docstrings are reStructuredText with Sphinx's
cross-reference roles (``:class:``, ``:func:``, ``:mod:``) and Google-style sections, which
autodoc and napoleon render as written; the pages are Markdown through MyST. The reference
pages for node parameters, topics and the command line are generated here from the code
(:mod:`plag_ros.apps.reference`) before the sources are read.
"""
from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))

from plag_ros import __version__  # noqa: E402
from plag_ros.apps.reference import write_reference  # noqa: E402

project = 'plag_ros'
author = 'the plag_ros developers'
release = version = __version__
extensions = ['myst_parser', 'sphinx.ext.autodoc', 'sphinx.ext.napoleon',
              'sphinx.ext.viewcode', 'sphinxcontrib.mermaid']
source_suffix = {'.md': 'markdown', '.rst': 'restructuredtext'}
root_doc = 'index'
exclude_patterns = ['_build', 'studies/*.md']
myst_enable_extensions = ['dollarmath', 'colon_fence']
myst_heading_anchors = 3
myst_fence_as_directive = ['mermaid']   # docs/layers.md's pictures, drawn
autodoc_member_order = 'bysource'
autodoc_typehints = 'none'             # the docstrings state shapes and units themselves
napoleon_google_docstring = True
napoleon_numpy_docstring = False
html_theme = 'furo'
html_title = f'plag_ros {release}'
suppress_warnings = ['myst.header']

write_reference(DOCS / 'reference' / 'generated')
