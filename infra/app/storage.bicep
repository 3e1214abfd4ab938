// The host storage account (AzureWebJobsStorage, identity-based) and the blob container the Flex
// Consumption plan deploys the app package from. Shared-key access is off: nothing uses a key.

param location string
param tags object

@description('Storage account name: 3-24 lowercase letters and digits, globally unique.')
@minLength(3)
@maxLength(24)
param name string

@description('Blob container holding the deployment package (functionAppConfig.deployment.storage).')
param deploymentContainerName string

@description('Public network access to the storage account: Disabled once the app reaches it over a private endpoint (see docs/design.md#threats).')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  // checkov:skip=CKV_AZURE_206: host storage holds only what a deploy recreates (host keys, leases, the package); the cases live in Cosmos DB
  // checkov:skip=CKV_AZURE_59: public network access is the parameter publicNetworkAccess (main.bicep: storagePublicNetworkAccess), Enabled by default because this template creates no VNet or private endpoints; Disabled with them
  // checkov:skip=CKV_AZURE_35: the default action follows storagePublicNetworkAccess (Deny when Disabled); shared keys are off, Entra ID only
  name: name
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: 'Standard_LRS'
  }
  properties: {
    accessTier: 'Hot'
    allowBlobPublicAccess: false
    allowSharedKeyAccess: false
    defaultToOAuthAuthentication: true
    dnsEndpointType: 'Standard'
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    publicNetworkAccess: publicNetworkAccess
    networkAcls: {
      bypass: 'AzureServices'
      defaultAction: publicNetworkAccess == 'Enabled' ? 'Allow' : 'Deny'
    }
  }

  resource blobService 'blobServices' = {
    name: 'default'

    resource deploymentContainer 'containers' = {
      name: deploymentContainerName
      properties: {
        publicAccess: 'None'
      }
    }
  }
}

output name string = storage.name
output id string = storage.id
output blobEndpoint string = storage.properties.primaryEndpoints.blob
