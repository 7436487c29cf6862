package olympia.spark;

import org.apache.iceberg.Table;
import org.apache.iceberg.TableProperties;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.exceptions.NoSuchTableException;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.spark.SparkCatalog;
import org.apache.iceberg.util.PropertyUtil;
import org.apache.spark.sql.connector.catalog.Identifier;

/**
 * Iceberg's SparkCatalog, except for DROP TABLE ... PURGE.
 *
 * <p>Iceberg 1.10's SparkCatalog drops the table and then deletes every file its metadata
 * reaches from the driver, without telling the catalog that a purge was meant. Against an
 * olympia server that loses data: a catalog rollback, a transaction rolled back, or time travel
 * to a version before the drop brings back a table whose files are gone. This class sends the
 * drop with purgeRequested=true and deletes nothing itself; the server deletes the files once no
 * kept catalog version reaches the table (spec/iceberg.md §4, "Purge"). A table whose gc.enabled
 * is false is refused, as SparkCatalog refuses it.
 */
public class OlympiaSparkCatalog extends SparkCatalog {
  @Override
  public boolean purgeTable(Identifier ident) {
    TableIdentifier id = buildIdentifier(ident);
    Table table;
    try {
      table = icebergCatalog().loadTable(id);
    } catch (NoSuchTableException e) {
      return false;
    }
    ValidationException.check(
        PropertyUtil.propertyAsBoolean(
            table.properties(), TableProperties.GC_ENABLED, TableProperties.GC_ENABLED_DEFAULT),
        "Cannot purge table: GC is disabled (deleting files may corrupt other tables)");
    return icebergCatalog().dropTable(id, true);
  }
}
