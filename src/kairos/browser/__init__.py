"""Computer use: a browser agent that perceives, acts and re-verifies (issue 28, book ch6 §1.5, §3.5).

- :mod:`.page`: the page as the model reads it: interactive elements numbered from the DOM and the
  accessibility tree (CDP), in document order with the text around them (structured Set-of-Mark), and the
  same numbers drawn as boxes on a screenshot for models that see;
- :mod:`.act`: one action by element number, then a re-check that the page changed as expected;
- :mod:`.session`: Chromium (Debian's, through Playwright) with a profile per session in kairos's state,
  downloads in the workspace, and only the hosts the user allowed;
- :mod:`.tools`: the ``browser`` toolset the agent loop calls (safe points, approvals and the injection
  defences come from the loop, as for every tool).
"""
