from django.db import transaction
from django.http import HttpRequest, JsonResponse

from .models import Order
from .tasks import mark_sent


def place_order(request: HttpRequest, number: int) -> JsonResponse:
    """The order and its job in one transaction; ``?fail=1`` raises after both were written."""
    with transaction.atomic():
        Order.objects.create(number=number)
        result = mark_sent.enqueue(number)
        if request.GET.get("fail"):
            raise RuntimeError("the view failed after enqueueing")
    return JsonResponse({"id": result.id})


def order_status(request: HttpRequest, result_id: str) -> JsonResponse:
    result = mark_sent.get_result(result_id)
    return JsonResponse({"status": str(result.status),
                         "value": result.return_value if result.is_finished else None})
