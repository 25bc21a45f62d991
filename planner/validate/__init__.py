"""``planner validate``: simulate published training runs and compare with their measurements.

Reads schema 1 (``shared/validation/README.md``) and schema 2 (``docs/validation-schema.md``):
cases in, one JSON object out. ``cases`` holds the two schemas (generated from the specs),
``frameworks`` the table from schema 1's free-text framework to a shipped stack, ``inputs``
what a case gives the simulator, ``run`` the policy for unstated knobs and the summary.
"""

from planner.profile import CalibrationProfile
from planner.validate.cases import (
    Case,
    CaseLayout,
    CaseMeasured,
    CaseMeasuredV2,
    CaseTraining,
    CaseV2,
    case_section,
)
from planner.validate.frameworks import FRAMEWORK_STACKS, stack_for_framework
from planner.validate.inputs import CaseInputs, case_inputs
from planner.validate.run import (
    case_file,
    check_case_list,
    note_repeated_ids,
    parse_case,
    read_case_file,
    run_case,
    summarize,
    validate_cases,
    validate_file,
)

__all__ = [
    "FRAMEWORK_STACKS",
    "CalibrationProfile",
    "Case",
    "CaseInputs",
    "CaseLayout",
    "CaseMeasured",
    "CaseMeasuredV2",
    "CaseTraining",
    "CaseV2",
    "case_file",
    "case_inputs",
    "case_section",
    "check_case_list",
    "note_repeated_ids",
    "parse_case",
    "read_case_file",
    "run_case",
    "stack_for_framework",
    "summarize",
    "validate_cases",
    "validate_file",
]
