"""demo_workload.py URI — the sample workload `make demo` replicates: a small shop written through pymongo."""
import random
import sys

import pymongo

client = pymongo.MongoClient(sys.argv[1])
shop = client.shop
rng = random.Random(7)

customers = [{"_id": f"c{i:03}", "name": f"Customer {i}", "vip": i % 7 == 0} for i in range(50)]
shop.customers.insert_many(customers)

for i in range(1, 301):
    shop.orders.insert_one({
        "_id": i,
        "customer": f"c{rng.randrange(50):03}",
        "items": [{"sku": f"sku-{rng.randrange(20)}", "qty": rng.randrange(1, 4)} for _ in range(rng.randrange(1, 4))],
        "status": "new",
        "total": round(rng.uniform(5, 200), 2),
    })
    if i % 3 == 0:
        shop.orders.update_one({"_id": i - 1}, {"$set": {"status": "paid"}, "$inc": {"total": 1.5}})
    if i % 10 == 0:
        shop.orders.update_one({"_id": i}, {"$push": {"items": {"sku": "gift", "qty": 1}}})
    if i % 25 == 0:
        shop.orders.delete_one({"_id": i - 5})

shop.orders.update_one({"_id": 1}, {"$unset": {"items": ""}})
shop.orders.replace_one({"_id": 2}, {"customer": "c000", "status": "replaced", "total": 0})
shop.customers.rename("clients")
shop.scratch.insert_one({"_id": 1})
shop.scratch.drop()
print("wrote", shop.orders.count_documents({}), "orders,", shop.clients.count_documents({}), "clients")
