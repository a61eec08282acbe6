"""The GPU model catalogue."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models


class GpuModel(models.Model):
    name = models.SlugField(unique=True, max_length=64)
    memory_gib = models.PositiveIntegerField(
        default=0, validators=[MinValueValidator(0), MaxValueValidator(100_000)]
    )

    class Meta:
        # The table the scheduler app created; the model moved here without moving its rows.
        db_table = "scheduler_gpumodel"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
