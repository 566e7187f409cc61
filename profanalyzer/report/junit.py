"""The JUnit XML of a `profanalyze check` report (compare.budget.CheckReport): one testsuite, one
testcase per check, deterministic; control characters XML 1.0 cannot carry are replaced."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the record it renders (built by profanalyzer.compare.budget)
    from profanalyzer.compare.budget import CheckReport


def junit_xml(report: CheckReport) -> str:
    """JUnit XML: one testsuite, one testcase per check (deterministic)."""
    import xml.etree.ElementTree as ET

    fails = sum(1 for c in report.checks if not c.passed)
    suites = ET.Element("testsuites", {"name": "profanalyze", "tests": str(len(report.checks)), "failures": str(fails), "errors": "0"})
    suite = ET.SubElement(
        suites,
        "testsuite",
        {"name": "profanalyze check", "tests": str(len(report.checks)), "failures": str(fails), "errors": "0", "skipped": "0", "time": "0"},
    )
    props = ET.SubElement(suite, "properties")
    for k, v in (("trace", report.trace), ("budget", report.budget), ("baseline", report.baseline or "")):
        ET.SubElement(props, "property", {"name": k, "value": _xml_safe(v)})
    for c in report.checks:
        tc = ET.SubElement(suite, "testcase", {"classname": f"profanalyze.{c.kind}", "name": _xml_safe(c.name), "time": "0"})
        if not c.passed:
            f = ET.SubElement(tc, "failure", {"message": _xml_safe(c.message), "type": c.kind})
            f.text = _xml_safe(c.message)
        else:
            ET.SubElement(tc, "system-out").text = _xml_safe(c.message)
    if report.comparison:
        ET.SubElement(suite, "system-out").text = _xml_safe(report.comparison)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml_safe(s: str) -> str:
    """XML 1.0 cannot carry most control characters even escaped."""
    return _XML_BAD.sub("\ufffd", str(s))
