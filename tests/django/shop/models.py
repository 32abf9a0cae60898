from django.db import models


class Order(models.Model):  # type: ignore[misc]  # Django without its stubs is Any
    number = models.IntegerField(unique=True)
    note = models.CharField(max_length=100, default="")

    class Meta:
        app_label = "shop"
