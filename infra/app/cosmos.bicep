// Cosmos DB (NoSQL API): the account, the database and every container the code uses, with the
// partition keys of casekeeper/core/ports.py (CONTAINERS) plus the change-feed trigger's lease container.
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

// Name, partition key path and indexing policy of every container. The application containers match
// casekeeper/core/ports.py CONTAINERS; tests/unit/test_infra.py checks this list against it.
//
// Indexing: each application container indexes only what the code filters, orders or groups on. Every
// other path (the history, the facts, an effect's request and result, the encoded checkpoint blob) is
// excluded by '/*', so a write pays for a few index terms instead of one per JSON value. Composite indexes
// serve the sweep queries that filter on a field and order by _ts. tests/unit/test_cosmos_indexing.py
// derives every query the code builds (the Cosmos SQL of each Query) and fails when one uses a path that
// is not included here or lacks its composite index, and when a path here serves no query. id is always
// indexed; _ts is listed, as the composite indexes name it.
var containers = [
  {
    name: 'cases'
    partitionKeyPath: '/id'
    indexingPolicy: {
      indexingMode: 'consistent'
      automatic: true
      includedPaths: [
        { path: '/status/?' }
        { path: '/openEffects/?' }
        { path: '/_ts/?' }
      ]
      excludedPaths: [
        { path: '/*' }
      ]
      compositeIndexes: [
        [
          { path: '/status', order: 'ascending' }
          { path: '/_ts', order: 'ascending' }
        ]
        [
          { path: '/status', order: 'ascending' }
          { path: '/_ts', order: 'ascending' }
          { path: '/id', order: 'ascending' }
        ]
        [
          { path: '/openEffects', order: 'ascending' }
          { path: '/_ts', order: 'ascending' }
          { path: '/id', order: 'ascending' }
        ]
        [
          { path: '/_ts', order: 'ascending' }
          { path: '/id', order: 'ascending' }
        ]
      ]
    }
  }
  {
    name: 'effects'
    partitionKeyPath: '/caseId'
    indexingPolicy: {
      indexingMode: 'consistent'
      automatic: true
      includedPaths: [
        { path: '/caseId/?' }
        { path: '/status/?' }
        { path: '/_ts/?' }
      ]
      excludedPaths: [
        { path: '/*' }
      ]
      compositeIndexes: [
        [
          { path: '/status', order: 'ascending' }
          { path: '/_ts', order: 'ascending' }
        ]
        [
          { path: '/status', order: 'ascending' }
          { path: '/_ts', order: 'ascending' }
          { path: '/id', order: 'ascending' }
        ]
      ]
    }
  }
  {
    name: 'checkpoints'
    partitionKeyPath: '/caseId'
    indexingPolicy: {
      indexingMode: 'consistent'
      automatic: true
      includedPaths: [
        { path: '/caseId/?' }
        { path: '/kind/?' }
        { path: '/_ts/?' }
      ]
      excludedPaths: [
        { path: '/*' }
      ]
      compositeIndexes: [
        [
          { path: '/kind', order: 'ascending' }
          { path: '/_ts', order: 'ascending' }
          { path: '/id', order: 'ascending' }
        ]
      ]
    }
  }
  {
    name: 'health'
    partitionKeyPath: '/kind'
    indexingPolicy: {
      indexingMode: 'consistent'
      automatic: true
      includedPaths: [
        { path: '/kind/?' }
        { path: '/caseId/?' }
        { path: '/notified/?' }
        { path: '/alerted/?' }
        { path: '/record/?' }
        { path: '/_ts/?' }
      ]
      excludedPaths: [
        { path: '/*' }
      ]
      compositeIndexes: [
        [
          { path: '/notified', order: 'ascending' }
          { path: '/record', order: 'ascending' }
          { path: '/_ts', order: 'ascending' }
        ]
        [
          { path: '/record', order: 'ascending' }
          { path: '/_ts', order: 'descending' }
        ]
        [
          { path: '/alerted', order: 'ascending' }
          { path: '/caseId', order: 'ascending' }
          { path: '/_ts', order: 'ascending' }
        ]
        [
          { path: '/alerted', order: 'ascending' }
          { path: '/record', order: 'ascending' }
          { path: '/_ts', order: 'ascending' }
        ]
        [
          { path: '/caseId', order: 'ascending' }
          { path: '/_ts', order: 'ascending' }
        ]
      ]
    }
  }
  // Lease container of the reconciler's change-feed trigger. With an identity-based connection the
  // trigger cannot create it (the data-plane role cannot create containers: 403), so it is made here,
  // and the trigger requires its partition key to be /id. It keeps the default policy (every path): the
  // trigger's library queries its leases, which are few and small.
  {
    name: 'leases'
    partitionKeyPath: '/id'
    indexingPolicy: {
      indexingMode: 'consistent'
      automatic: true
      includedPaths: [
        { path: '/*' }
      ]
      excludedPaths: [
        { path: '/"_etag"/?' }
      ]
      compositeIndexes: []
    }
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
        indexingPolicy: container.indexingPolicy
        // Time to live on, with no default expiry: only a document carrying its own "ttl" expires. The app
        // stamps one on documents that reached a final state (shared/app/retention.py); everything else,
        // the leases included, stays until deleted.
        defaultTtl: -1
      }
    }
  }
]

output accountName string = account.name
output accountId string = account.id
output endpoint string = account.properties.documentEndpoint
output databaseName string = database.name
