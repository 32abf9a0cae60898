from django.db import models


class Order(models.Model):
    number = models.IntegerField(unique=True)
    note = models.CharField(max_length=100, default="")

    class Meta:
        app_label = "shop"
