// Cosmos DB (NoSQL API): the account, the database and every container the code uses, with the
// partition keys of shared/core/ports.py (CONTAINERS) plus the change-feed trigger's lease container.
// Keys are disabled on the account: all access is Microsoft Entra ID (sqlRoleAssignments in rbac.bicep).

param location string
param tags object

@description('Account name: 3-44 lowercase letters, digits and hyphens, globally unique.')
@minLength(3)
@maxLength(44)
param accountName string

@description('Database name; the app reads it from COSMOS_DATABASE.')
param databaseName string

@description('Serverless (pay per request) or provisioned throughput. Cannot be changed after the account exists.')
param serverless bool = true

@description('Database-level autoscale maximum RU/s, shared by the containers; used only when serverless is false.')
@minValue(1000)
param autoscaleMaxThroughput int = 1000

// Name and partition key path of every container. The application containers match
// shared/core/ports.py CONTAINERS; tests/unit/test_infra.py checks this list against it.
var containers = [
  {
    name: 'cases'
    partitionKeyPath: '/id'
  }
  {
    name: 'effects'
    partitionKeyPath: '/caseId'
  }
  {
    name: 'checkpoints'
    partitionKeyPath: '/caseId'
  }
  {
    name: 'health'
    partitionKeyPath: '/kind'
  }
  // Lease container of the reconciler's change-feed trigger. With an identity-based connection the
  // trigger cannot create it (the data-plane role cannot create containers: 403), so it is made here,
  // and the trigger requires its partition key to be /id.
  {
    name: 'leases'
    partitionKeyPath: '/id'
  }
]

@description('Public network access to Cosmos DB: Disabled once the app reaches it over a private endpoint (see docs/design.md#threats).')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

resource account 'Microsoft.DocumentDB/databaseAccounts@2024-11-15' = {
  // checkov:skip=CKV_AZURE_101: public network access is the parameter publicNetworkAccess (main.bicep: cosmosPublicNetworkAccess), Enabled by default because this template creates no VNet or private endpoints; Disabled with them
  // checkov:skip=CKV_AZURE_99: keys are disabled (Entra ID only); network restriction as for CKV_AZURE_101, the parameter cosmosPublicNetworkAccess
  name: accountName
  location: location
  tags: tags
  kind: 'GlobalDocumentDB'
  properties: {
    databaseAccountOfferType: 'Standard'
    locations: [
      {
        locationName: location
        failoverPriority: 0
        isZoneRedundant: false
      }
    ]
    consistencyPolicy: {
      defaultConsistencyLevel: 'Session'
    }
    capabilities: serverless ? [
      {
        name: 'EnableServerless'
      }
    ] : []
    disableLocalAuth: true
    disableKeyBasedMetadataWriteAccess: true
    minimalTlsVersion: 'Tls12'
    publicNetworkAccess: publicNetworkAccess
  }
}

resource database 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases@2024-11-15' = {
  parent: account
  name: databaseName
  properties: {
    resource: {
      id: databaseName
    }
    options: serverless ? {} : {
      autoscaleSettings: {
        maxThroughput: autoscaleMaxThroughput
      }
    }
  }
}

resource sqlContainers 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@2024-11-15' = [
  for container in containers: {
    parent: database
    name: container.name
    properties: {
      resource: {
        id: container.name
        partitionKey: {
          paths: [
            container.partitionKeyPath
          ]
          kind: 'Hash'
          version: 2
        }
      }
    }
  }
]

output accountName string = account.name
output accountId string = account.id
output endpoint string = account.properties.documentEndpoint
output databaseName string = database.name
