"""Vision models (Paddle's `paddle.vision`): `primc.vision.models`."""

from primc.vision import models
