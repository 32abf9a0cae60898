from django.urls import path

from shop import views

urlpatterns = [
    path("orders/<int:number>", views.place_order),
    path("results/<str:result_id>", views.result),
]
