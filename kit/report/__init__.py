"""The written reports: the batch report (``kit.report.batch``: report.md, report.html and the markdown/HTML
helpers the history report shares) and the offline HTML export of an executed notebook
(``kit.report.notebook_html``). Callers import the submodule they need.
"""
