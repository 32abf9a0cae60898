from django.db import transaction
from django.http import HttpRequest, JsonResponse

from .models import Order
from .tasks import send_receipt


def place_order(request: HttpRequest, number: int) -> JsonResponse:
    """The order and its receipt's job commit together; with ``?fail=1`` neither exists."""
    with transaction.atomic():
        Order.objects.create(number=number)
        result = send_receipt.enqueue(number)
        if request.GET.get("fail"):
            raise RuntimeError("the view failed: the order and its job roll back together")
    return JsonResponse({"result_id": result.id, "status": result.status})


def result(request: HttpRequest, result_id: str) -> JsonResponse:
    """The task's state, read back from its job."""
    found = send_receipt.get_result(result_id)
    return JsonResponse({"status": found.status, "attempts": found.attempts,
                         "return_value": found.return_value if found.status == "SUCCESSFUL" else None,
                         "errors": [e.traceback.splitlines()[-1] for e in found.errors]})
