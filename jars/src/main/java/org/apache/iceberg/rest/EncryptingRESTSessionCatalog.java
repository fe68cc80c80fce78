package org.apache.iceberg.rest;

import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;
import java.util.function.Supplier;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.MetadataUpdate;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.encryption.EncryptionUtil;
import org.apache.iceberg.encryption.KeyManagementClient;
import org.apache.iceberg.io.FileIO;

/**
 * A {@link RESTSessionCatalog} whose table operations encrypt: {@link
 * EncryptingRESTTableOperations} over the KMS named by the {@code encryption.kms-impl} catalog
 * property (instantiated with the catalog properties, as HiveCatalog does). Use it through
 * {@code io.pyicebergcrypto.rest.EncryptingRestCatalog}.
 */
public class EncryptingRESTSessionCatalog extends RESTSessionCatalog {
  private KeyManagementClient keyManagementClient;
  private String catalogUri;

  public EncryptingRESTSessionCatalog(Function<Map<String, String>, RESTClient> clientBuilder) {
    super(clientBuilder, null);
  }

  @Override
  public void initialize(String name, Map<String, String> props) {
    this.catalogUri = props.get(CatalogProperties.URI);
    if (props.containsKey(CatalogProperties.ENCRYPTION_KMS_IMPL)) {
      this.keyManagementClient = EncryptionUtil.createKmsClient(props);
    }
    super.initialize(name, props);
  }

  /** The KMS of this catalog, or null without {@code encryption.kms-impl}. */
  public KeyManagementClient keyManagementClient() {
    return keyManagementClient;
  }

  @Override
  protected RESTTableOperations newTableOps(RESTClient restClient, String path,
      Supplier<Map<String, String>> readHeaders, Supplier<Map<String, String>> mutationHeaders,
      FileIO fileIO, TableMetadata current, Set<Endpoint> supportedEndpoints) {
    return newTableOps(restClient, path, readHeaders, mutationHeaders, fileIO, current,
        supportedEndpoints, Map.of());
  }

  @Override
  protected RESTTableOperations newTableOps(RESTClient restClient, String path,
      Supplier<Map<String, String>> readHeaders, Supplier<Map<String, String>> mutationHeaders,
      FileIO fileIO, TableMetadata current, Set<Endpoint> supportedEndpoints,
      Map<String, String> readQueryParams) {
    return new EncryptingRESTTableOperations(keyManagementClient, catalogUri, restClient, path,
        readHeaders, mutationHeaders, fileIO, RESTTableOperations.UpdateType.SIMPLE,
        new java.util.ArrayList<>(), current, supportedEndpoints, readQueryParams);
  }

  @Override
  protected RESTTableOperations newTableOps(RESTClient restClient, String path,
      Supplier<Map<String, String>> readHeaders, Supplier<Map<String, String>> mutationHeaders,
      FileIO fileIO, RESTTableOperations.UpdateType updateType, List<MetadataUpdate> createChanges,
      TableMetadata current, Set<Endpoint> supportedEndpoints) {
    return new EncryptingRESTTableOperations(keyManagementClient, catalogUri, restClient, path,
        readHeaders, mutationHeaders, fileIO, updateType, createChanges, current, supportedEndpoints, Map.of());
  }
}
