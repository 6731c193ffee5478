"""Closed-form noise schedules (paper Table noise_schedules)."""
from __future__ import annotations

from registry import ComponentSpec

from .config import (
    GeometricScheduleConfig,
    LogLinearScheduleConfig,
    PolynomialScheduleConfig,
    ScheduleConfig,
    VPCosineScheduleConfig,
)

_FORMS = "ladd_plugins.schedules.closed_form"

#: this subpackage's components, registered by ladd's plugin (``ladd_plugins.ladd_components``)
SPECS = [
    ComponentSpec(
        "schedule",
        "linear",
        f"{_FORMS}:LinearSchedule",
        ScheduleConfig,
        "1 - tau (discrete linear; as a VP schedule abar^2 = 1 - tau)",
    ),
    ComponentSpec("schedule", "vp_linear", f"{_FORMS}:LinearSchedule", ScheduleConfig, "VP-linear: abar^2 = 1 - tau"),
    ComponentSpec("schedule", "polynomial", f"{_FORMS}:PolynomialSchedule", PolynomialScheduleConfig, "1 - tau^power"),
    ComponentSpec(
        "schedule",
        "geometric",
        f"{_FORMS}:GeometricSchedule",
        GeometricScheduleConfig,
        "exp(-beta_min^(1-tau) beta_max^tau)",
    ),
    ComponentSpec("schedule", "cosine", f"{_FORMS}:CosineSchedule", ScheduleConfig, "cos(pi tau / 2)"),
    ComponentSpec(
        "schedule",
        "loglinear",
        f"{_FORMS}:LogLinearSchedule",
        LogLinearScheduleConfig,
        "MDLM log-linear: 1 - (1 - eps) tau",
    ),
    ComponentSpec(
        "schedule",
        "vp_cosine",
        f"{_FORMS}:VPCosineSchedule",
        VPCosineScheduleConfig,
        "VP-cosine: abar^2 = cos^2(((tau + s)/(1 + s)) pi/2)",
    ),
    ComponentSpec("schedule", "vp_sqrt", f"{_FORMS}:VPSqrtSchedule", ScheduleConfig, "VP-sqrt: abar^2 = sqrt(1 - tau)"),
]
