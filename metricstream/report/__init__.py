"""Reports: the confusion-matrix summary and classification report, and the score report.

``confusion.py`` formats a matrix's metrics (text, Markdown, HTML, scikit-learn's
classification report); ``scores.py`` the command line's score mode.
"""

from .confusion import classification_report, summary, summary_html, summary_markdown, summary_text

__all__ = ["classification_report", "summary", "summary_html", "summary_markdown", "summary_text"]
