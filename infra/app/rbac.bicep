// Every role the function app's identity holds. Data-plane roles only: the app manages no resource.
//
// | Resource                    | Role                                    | Why                                                     |
// | storage account             | Storage Blob Data Owner                 | AzureWebJobsStorage (host keys, timer-trigger leases)   |
// |                             |                                         | and the Flex deployment package container               |
// |                             | Storage Queue Data Contributor          | the host's own queues (AzureWebJobsStorage)             |
// |                             | Storage Table Data Contributor          | the host's own tables; without these two the host logs  |
// |                             |                                         | 403s (the roles Microsoft's Flex Consumption sample     |
// |                             |                                         | grants its app identity)                                |
// | Service Bus queue           | Azure Service Bus Data Owner            | receive (session trigger), send (ingress, approvals,    |
// |   case-events               |                                         | scheduled re-checks) and read queue runtime properties, |
// |                             |                                         | which the scale decision needs (Receiver alone cannot)  |
// | Cosmos DB account           | Cosmos DB Built-in Data Contributor     | documents, change feed and the leases container         |
// |   (sqlRoleAssignments)      |   00000000-0000-0000-0000-000000000002  | (a data-plane role: Azure IAM roles do not grant it)    |
// | Key Vault                   | Key Vault Secrets User                  | Key Vault references: webhook, alert URL, model key     |
// | Application Insights        | Monitoring Metrics Publisher            | Entra ID-authenticated telemetry ingestion              |
// | Azure OpenAI (optional)     | Cognitive Services OpenAI User          | openai-rbac.bicep, when a resource id is given          |

@description('Principal (object) id of the function app identity.')
param principalId string

param storageAccountName string
param serviceBusNamespaceName string
param serviceBusQueueName string
param cosmosAccountName string
param keyVaultName string
param applicationInsightsName string

// Built-in role definition ids (the same in every tenant).
var roles = {
  storageBlobDataOwner: 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'
  storageQueueDataContributor: '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
  storageTableDataContributor: '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'
  serviceBusDataOwner: '090c5cfd-751d-490a-894a-3ce6f1109419'
  keyVaultSecretsUser: '4633458b-17de-408a-b874-0445c86b69e6'
  monitoringMetricsPublisher: '3913510d-42f4-4e42-8a64-420c390055eb'
}

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

resource vault 'Microsoft.KeyVault/vaults@2023-07-01' existing = {
  name: keyVaultName
}

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

resource storageBlobDataOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(storage.id, principalId, roles.storageBlobDataOwner)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageBlobDataOwner)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

resource storageQueueDataContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(storage.id, principalId, roles.storageQueueDataContributor)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDataContributor)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

resource storageTableDataContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(storage.id, principalId, roles.storageTableDataContributor)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageTableDataContributor)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

resource serviceBusDataOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(serviceBus::queue.id, principalId, roles.serviceBusDataOwner)
  scope: serviceBus::queue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataOwner)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
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

resource keyVaultSecretsUser 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(vault.id, principalId, roles.keyVaultSecretsUser)
  scope: vault
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.keyVaultSecretsUser)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

resource monitoringMetricsPublisher 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(applicationInsights.id, principalId, roles.monitoringMetricsPublisher)
  scope: applicationInsights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.monitoringMetricsPublisher)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}
