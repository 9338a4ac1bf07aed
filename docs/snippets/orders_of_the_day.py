# src/shop/defs/orders_of_the_day.py: an asset of your own on each complete day of topic `orders`
import dagster as dg
from matos_dagster.core.days.read import read_window


@dg.asset(
    # days_orders's partitions: UTC days (an HourlyPartitionsDefinition for `time_window: hour`).
    partitions_def=dg.DailyPartitionsDefinition(start_date="2024-01-01", timezone="UTC"),
    deps=[dg.AssetKey(["eu", "days_orders"])],
    required_resource_keys={"eu_swift"},
    # In the archive's days group, so that its `eu_event_time_automation` sensor evaluates it.
    group_name="eu_event_time",
    # eager() alone looks at the latest day only: a day made stale by late records would never run again.
    automation_condition=dg.AutomationCondition.eager().without(dg.AutomationCondition.in_latest_time_window()),
)
def orders_of_the_day(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    with context.resources.eu_swift.store() as store:
        day = read_window(store, store.params.prefix, "orders", context.partition_key)  # a pyarrow Table
    return dg.MaterializeResult(metadata={"records": day.num_rows})
