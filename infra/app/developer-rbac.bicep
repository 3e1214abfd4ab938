// The data roles a developer needs to run the app on their own machine (`func start`) against this
// environment, identity-based with their own sign-in (docs/func-start.md, path 2). main.bicep deploys this
// only when a principal is given: azd passes the signed-in account (AZURE_PRINCIPAL_ID).
//
// | Resource                    | Role                                    | Why                                                     |
// | Cosmos DB account           | Cosmos DB Built-in Data Contributor     | the store, the reconciler trigger's change feed and its |
// |   (sqlRoleAssignments)      |   00000000-0000-0000-0000-000000000002  | leases (a data-plane role, not Azure IAM)               |
// | Service Bus queue           | Azure Service Bus Data Owner            | the case worker's session trigger receives, the ingress |
// |   case-events               |                                         | sends, `casekeeper events` reads the queue's counts     |
// | storage account             | Storage Blob Data Owner,                | only with `local-settings azd --host-storage azure`:    |
// |                             | Storage Queue Data Contributor,         | the local Functions host's own storage (keys, timer     |
// |                             | Storage Table Data Contributor          | leases) in the environment's account                    |
//
// Nothing here grants Key Vault or deployment rights: the webhook secret reaches local.settings.json from the
// azd environment, where it was set.

@description('Principal (object) id of the developer.')
param principalId string

@allowed([
  'User'
  'ServicePrincipal'
  'Group'
])
@description('What kind of principal principalId is (azd signs in as a user, CI as a service principal).')
param principalType string = 'User'

param storageAccountName string
param serviceBusNamespaceName string
param serviceBusQueueName string
param cosmosAccountName string

// Built-in role definition ids (the same in every tenant).
var roles = {
  storageBlobDataOwner: 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'
  storageQueueDataContributor: '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
  storageTableDataContributor: '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'
  serviceBusDataOwner: '090c5cfd-751d-490a-894a-3ce6f1109419'
}
var storageRoles = [
  roles.storageBlobDataOwner
  roles.storageQueueDataContributor
  roles.storageTableDataContributor
]

// Cosmos DB Built-in Data Contributor: a Cosmos DB data-plane role definition, not an Azure role.
var cosmosDataContributorRoleId = '00000000-0000-0000-0000-000000000002'

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource serviceBus 'Microsoft.ServiceBus/namespaces@2024-01-01' existing = {
  name: serviceBusNamespaceName

  resource queue 'queues' existing = {
    name: serviceBusQueueName
  }
}

resource cosmos 'Microsoft.DocumentDB/databaseAccounts@2024-11-15' existing = {
  name: cosmosAccountName
}

resource cosmosDataContributor 'Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments@2024-11-15' = {
  parent: cosmos
  name: guid(cosmos.id, principalId, cosmosDataContributorRoleId)
  properties: {
    roleDefinitionId: '${cosmos.id}/sqlRoleDefinitions/${cosmosDataContributorRoleId}'
    principalId: principalId
    scope: cosmos.id
  }
}

resource serviceBusDataOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(serviceBus::queue.id, principalId, roles.serviceBusDataOwner)
  scope: serviceBus::queue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataOwner)
    principalId: principalId
    principalType: principalType
  }
}

resource storageData 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for role in storageRoles: {
    name: guid(storage.id, principalId, role)
    scope: storage
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', role)
      principalId: principalId
      principalType: principalType
    }
  }
]
