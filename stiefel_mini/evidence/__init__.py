"""The book's evidence: paired comparisons, their correction, the paper's claims and their verdicts.

One layer computes every p-value and verdict that the book shows:

- :mod:`stiefel_mini.evidence.compare`: :func:`paired` (one comparison, one row schema),
  :func:`correct` (Holm within a family, with Tarone's rule), :func:`ratio`;
- :mod:`stiefel_mini.evidence.runs`: which runs of a results file a comparison pairs;
- :mod:`stiefel_mini.evidence.claims`: the claims, each with its primary comparison declared in code;
- :mod:`stiefel_mini.evidence.measure`: a declared comparison computed from the files (:func:`compute`);
- :mod:`stiefel_mini.evidence.rule`: the one decision rule (when a comparison may be given a direction);
- :mod:`stiefel_mini.evidence.verdict`: a claim's verdict words from its primary, by that rule;
- :mod:`stiefel_mini.evidence.words`: the plain words a reader reads of a comparison row;
- :mod:`stiefel_mini.evidence.sentences`: a verdict's phrase and sentence, what fresh seeds said of it,
  and the arms' short names in a figure;
- :mod:`stiefel_mini.evidence.confirm`: a primary judged again on the runs that can confirm it;
- :mod:`stiefel_mini.evidence.judge`: :func:`verdicts`, each with its confirmation,
  :func:`across_claims` (Holm across the claims' primaries) and :func:`questions` (the reader's
  questions, outside the paper's family);
- :mod:`stiefel_mini.evidence.plain`: the book's answer in plain words (the intro's bottom line,
  Part IV's table);
- :mod:`stiefel_mini.evidence.cards`: the answer per task (vision transformer, grokking, small language
  model), each Stiefel arm in its best configuration with the weaker beside it;
- :mod:`stiefel_mini.evidence.ledger`: when each primary was declared, when each run started and on
  which machine (the confirmation ledger, ``results/ledger.json``);
- :mod:`stiefel_mini.evidence.tables`: the chapters' secondary tables (rows for lists of arm pairs);
- :mod:`stiefel_mini.evidence.render`: the intro's table, the chapters' boxes, the ledger and the
  comparison tables as HTML.

``python -m stiefel_mini.evidence`` prints the tables; ``--json`` prints the verdicts as data.
"""

from stiefel_mini.evidence.claims import CLAIMS, Claim, Comparison, claim
from stiefel_mini.evidence.judge import across_claims, as_data, claim_number, evaluate, questions, verdicts
from stiefel_mini.evidence.measure import compute
from stiefel_mini.evidence.words import effect_text, sure_text
from stiefel_mini.evidence.compare import ALPHA, correct, paired, ratio
from stiefel_mini.evidence.render import (bottom_line_html, box_html, cards_html, codes_html, confirmation_html,
                                          details_html, legend_html, ledger_html, scale_note_html, summary_html, table_html,
                                          tally_html)
from stiefel_mini.evidence.tables import GROKKING_METRICS, accuracy_rows, grokking_rows

__all__ = ["ALPHA", "CLAIMS", "Claim", "Comparison", "GROKKING_METRICS", "accuracy_rows", "across_claims", "as_data",
           "bottom_line_html", "box_html", "cards_html", "claim", "claim_number", "codes_html", "compute", "confirmation_html", "correct",
           "details_html", "effect_text", "evaluate", "grokking_rows", "ledger_html", "legend_html", "paired",
           "questions", "ratio", "scale_note_html", "summary_html", "sure_text", "table_html", "tally_html", "verdicts"]
