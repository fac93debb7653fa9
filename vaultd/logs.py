"""structlog set-up: readable lines on a terminal, JSON lines for services and files."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

from vaultd.config import LogSection


def configure(section: LogSection, stream: TextIO | None = None) -> None:
    level = getattr(logging, section.level.upper())
    out: TextIO = stream or sys.stderr
    if section.file:
        out = open(section.file, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - lives as long as the process
    fmt = section.format
    if fmt == "auto":
        fmt = "console" if out.isatty() else "json"
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer(colors=out.isatty())
        if fmt == "console"
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
