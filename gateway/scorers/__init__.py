"""Scorers that call a model: the LLM scorer, its prompt, parsing and transports, and summaries.
"""

from gateway.scorers.llm import CapturingScorer, LLMScorer, ScorerRun
from gateway.scorers.summaries import Summarizer, SummaryRun

__all__ = [
    "CapturingScorer",
    "LLMScorer",
    "ScorerRun",
    "Summarizer",
    "SummaryRun",
]
