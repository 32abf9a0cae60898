from django.db import models


class Order(models.Model):
    number = models.IntegerField(unique=True)
    receipt_sent = models.BooleanField(default=False)
