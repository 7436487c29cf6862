package olympia.spark;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableProperties;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.exceptions.NoSuchTableException;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.rest.RESTUtil;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.JsonNode;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.iceberg.spark.SparkCatalog;
import org.apache.iceberg.util.PropertyUtil;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.analysis.NoSuchProcedureException;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.iceberg.catalog.Procedure;
import org.apache.spark.sql.connector.iceberg.catalog.ProcedureParameter;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.collection.JavaConverters;

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
 *
 * <p>Its procedure system.remove_orphan_files is olympia's (spec/rest.md §11): Iceberg's counts as
 * orphans the files the table's current metadata does not reach, and so deletes files that older
 * catalog versions read (time travel, rollback_to); this one asks the server, which keeps every
 * file a kept catalog version or an open distributed transaction reaches.
 */
public class OlympiaSparkCatalog extends SparkCatalog {
  @Override
  public Procedure loadProcedure(Identifier ident) throws NoSuchProcedureException {
    String[] ns = ident.namespace();
    if (ns.length == 1
        && ns[0].equalsIgnoreCase("system")
        && ident.name().equalsIgnoreCase("remove_orphan_files")) {
      return new RemoveOrphanFiles();
    }
    return super.loadProcedure(ident);
  }

  /** A setting of this catalog, as Spark's session has it now (spark.sql.catalog.NAME.KEY). */
  private String option(String key) {
    scala.Option<String> value =
        SparkSession.active().conf().getOption("spark.sql.catalog." + name() + "." + key);
    return value.isDefined() ? value.get() : null;
  }

  /** CALL catalog.system.remove_orphan_files(...), answered by the olympia server. */
  private final class RemoveOrphanFiles implements Procedure {
    private final ProcedureParameter[] parameters = {
      ProcedureParameter.required("table", DataTypes.StringType),
      ProcedureParameter.optional("older_than", DataTypes.TimestampType),
      ProcedureParameter.optional("location", DataTypes.StringType),
      ProcedureParameter.optional("dry_run", DataTypes.BooleanType),
      ProcedureParameter.optional("max_concurrent_deletes", DataTypes.IntegerType),
      ProcedureParameter.optional("file_list_view", DataTypes.StringType),
      ProcedureParameter.optional(
          "equal_schemes", DataTypes.createMapType(DataTypes.StringType, DataTypes.StringType)),
      ProcedureParameter.optional(
          "equal_authorities",
          DataTypes.createMapType(DataTypes.StringType, DataTypes.StringType)),
      ProcedureParameter.optional("prefix_mismatch_mode", DataTypes.StringType),
      ProcedureParameter.optional("stream_results", DataTypes.BooleanType)
    };

    @Override
    public ProcedureParameter[] parameters() {
      return parameters;
    }

    @Override
    public StructType outputType() {
      return new StructType(
          new StructField[] {
            new StructField("orphan_file_location", DataTypes.StringType, false, Metadata.empty())
          });
    }

    @Override
    public String description() {
      return "olympia's remove_orphan_files: keeps every file a kept catalog version reads";
    }

    @Override
    public InternalRow[] call(InternalRow args) {
      if (!args.isNullAt(5)) {
        throw new IllegalArgumentException(
            "remove_orphan_files of an olympia catalog lists the files itself: file_list_view "
                + "is not supported");
      }
      List<String> parts = identifierParts(args.getUTF8String(0).toString());
      ObjectMapper json = new ObjectMapper();
      ObjectNode body = json.createObjectNode();
      if (!args.isNullAt(1)) {
        body.put("older-than-ms", args.getLong(1) / 1000);
      }
      if (!args.isNullAt(2)) {
        body.put("location", args.getUTF8String(2).toString());
      }
      body.put("dry-run", !args.isNullAt(3) && args.getBoolean(3));
      String uri = option("uri");
      if (uri == null) {
        throw new IllegalStateException("catalog " + name() + " has no uri");
      }
      uri = RESTUtil.stripTrailingSlash(uri);
      String prefix = prefix(uri, json);
      Namespace namespace =
          Namespace.of(parts.subList(0, parts.size() - 1).toArray(new String[0]));
      String path =
          uri
              + "/v1/"
              + (prefix == null || prefix.isEmpty() ? "" : RESTUtil.encodeString(prefix) + "/")
              + "namespaces/"
              + RESTUtil.encodeNamespace(namespace)
              + "/tables/"
              + RESTUtil.encodeString(parts.get(parts.size() - 1))
              + "/orphan-files";
      JsonNode answer;
      try {
        answer = json.readTree(send(path, json.writeValueAsString(body)));
      } catch (IOException e) {
        throw new IllegalStateException("remove_orphan_files: " + e.getMessage(), e);
      }
      List<InternalRow> rows = new ArrayList<>();
      for (JsonNode file : answer.path("orphan-file-locations")) {
        rows.add(new GenericInternalRow(new Object[] {UTF8String.fromString(file.asText())}));
      }
      return rows.toArray(new InternalRow[0]);
    }

    /** The table's name relative to this catalog, as Spark parses a multipart identifier. */
    private List<String> identifierParts(String name) {
      List<String> parts;
      try {
        parts =
            new ArrayList<>(
                JavaConverters.seqAsJavaList(
                    SparkSession.active().sessionState().sqlParser().parseMultipartIdentifier(name)));
      } catch (Exception e) {
        throw new IllegalArgumentException("Cannot parse table name '" + name + "'", e);
      }
      if (parts.size() > 1 && parts.get(0).equalsIgnoreCase(name())) {
        parts.remove(0);
      }
      if (parts.size() < 2) {
        throw new IllegalArgumentException(
            "table '" + name + "' must name a namespace and a table of catalog " + name());
      }
      return parts;
    }

    /** The server's prefix, from GET {uri}/v1/config (its overrides, as Iceberg's client). */
    private String prefix(String uri, ObjectMapper json) {
      String configured = option("prefix");
      try {
        JsonNode config = json.readTree(get(uri + "/v1/config"));
        String override = config.path("overrides").path("prefix").asText(null);
        return override != null ? override : configured;
      } catch (IOException e) {
        throw new IllegalStateException("remove_orphan_files: " + e.getMessage(), e);
      }
    }

    private String get(String url) throws IOException {
      return exchange(builder(url).GET().build());
    }

    private String send(String url, String body) throws IOException {
      return exchange(
          builder(url)
              .header("Content-Type", "application/json")
              .POST(HttpRequest.BodyPublishers.ofString(body, StandardCharsets.UTF_8))
              .build());
    }

    private HttpRequest.Builder builder(String url) {
      HttpRequest.Builder b =
          HttpRequest.newBuilder(URI.create(url)).timeout(Duration.ofHours(1));
      String token = option("token");
      if (token != null) {
        b.header("Authorization", "Bearer " + token);
      }
      return b;
    }

    private String exchange(HttpRequest request) throws IOException {
      HttpResponse<String> response;
      try {
        response =
            HttpClient.newHttpClient()
                .send(request, HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IOException("interrupted", e);
      }
      if (response.statusCode() / 100 != 2) {
        String message = response.body();
        try {
          message = new ObjectMapper().readTree(message).path("error").path("message").asText(message);
        } catch (IOException ignored) {
          // not JSON: the body as it is
        }
        if (response.statusCode() == 400) {
          throw new IllegalArgumentException(message);
        }
        if (response.statusCode() == 404) {
          throw new NoSuchTableException("%s", message);
        }
        throw new IllegalStateException(
            "remove_orphan_files failed (" + response.statusCode() + "): " + message);
      }
      return response.body();
    }
  }
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
