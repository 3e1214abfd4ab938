// The Flex Consumption plan and the Python function app.
//
// Flex Consumption, not Elastic Premium: Flex runs every trigger Casekeeper uses (HTTP, Service Bus
// with sessions, Cosmos DB change feed, timer), scales each non-HTTP function on its own
// (case_worker scales apart from the reconciler), scales to zero, and needs no Azure Files content
// share: the app package comes from a blob container read with the managed identity. Elastic
// Premium keeps its content on an Azure Files share whose setting
// (WEBSITE_CONTENTAZUREFILECONNECTIONSTRING) is an account-key connection string, which would force
// shared-key access back on for the storage account. No VNet is needed for any of it.
//
// On Flex, the runtime is set here in functionAppConfig.runtime (FUNCTIONS_WORKER_RUNTIME and
// linuxFxVersion are replaced), and FUNCTIONS_EXTENSION_VERSION is set by the platform (~4); the
// Functions docs list both app settings as deprecated for Flex, so neither is emitted.

param location string
param tags object
param planName string
param functionAppName string

@description('Resource id of the user-assigned identity the app runs as.')
param identityId string

@description('Client id of that identity: selects it for identity-based connections and DefaultAzureCredential.')
param identityClientId string

param storageAccountName string
param deploymentContainerName string
param applicationInsightsName string

@description('Python version. requirements.txt pins azure-functions 1.26.0 for Python 3.11-3.12 and 2.3.0 for 3.13.')
@allowed([
  '3.11'
  '3.12'
  '3.13'
])
param pythonVersion string = '3.13'

@minValue(40)
@maxValue(1000)
param maximumInstanceCount int = 40

@allowed([
  512
  2048
  4096
])
param instanceMemoryMB int = 2048

@description('Always-ready instances, e.g. [{ name: \'function:case_worker\', instanceCount: 1 }] so the first message after idle is not delayed by a cold start.')
param alwaysReady array = []

@description('The application\'s own settings (names the code reads), name -> value.')
param appSettings object

@description('Client id of the Microsoft Entra ID app registration people sign in to the pages with (App Service Authentication). Empty: no sign-in, and the pages answer 401.')
param authClientId string = ''

// Settings the Functions host and the Azure SDKs read, added to the application's own.
var hostSettings = [
  // Host storage, identity-based: the host derives the blob/queue/table endpoints from the name.
  {
    name: 'AzureWebJobsStorage__accountName'
    value: storageAccountName
  }
  {
    name: 'AzureWebJobsStorage__credential'
    value: 'managedidentity'
  }
  {
    name: 'AzureWebJobsStorage__clientId'
    value: identityClientId
  }
  // Telemetry. The host authenticates with the identity; the component accepts nothing else when
  // monitoring.bicep disables local auth. The code reads the connection string too.
  {
    name: 'APPLICATIONINSIGHTS_CONNECTION_STRING'
    value: applicationInsights.properties.ConnectionString
  }
  {
    name: 'APPLICATIONINSIGHTS_AUTHENTICATION_STRING'
    value: 'ClientId=${identityClientId};Authorization=AAD'
  }
  // host.json sets "telemetryMode": "OpenTelemetry". This lets the Python worker stream its own
  // OpenTelemetry data, so the host stops forwarding the worker's logs (no duplicates), and makes the
  // worker attach each invocation's trace context before the function runs, so the code's spans join the
  // host's request. The code exports itself (shared/app/telemetry.configure: Application Insights with the
  // managed identity). PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY is deliberately not set: with it the
  // worker would call configure_azure_monitor() itself, without the Entra credential this component
  // requires (monitoring.bicep disables local auth), and the code's own call would configure it twice.
  {
    name: 'PYTHON_ENABLE_OPENTELEMETRY'
    value: 'true'
  }
  // azure-identity's DefaultAzureCredential (shared/stores/cosmos.py, shared/messaging/servicebus.py,
  // shared/workflow/model_client.py, its async form) picks the user-assigned identity by this client id.
  {
    name: 'AZURE_CLIENT_ID'
    value: identityClientId
  }
]

// The loop runs over a parameter only, so its length is known when the deployment starts.
var applicationSettings = [
  for setting in items(appSettings): {
    name: setting.key
    value: setting.value
  }
]

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

resource plan 'Microsoft.Web/serverfarms@2024-04-01' = {
  name: planName
  location: location
  tags: tags
  kind: 'functionapp'
  sku: {
    name: 'FC1'
    tier: 'FlexConsumption'
  }
  properties: {
    reserved: true
  }
}

resource functionApp 'Microsoft.Web/sites@2024-04-01' = {
  name: functionAppName
  location: location
  tags: union(tags, {
    'azd-service-name': 'casekeeper'
  })
  kind: 'functionapp,linux'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityId}': {}
    }
  }
  properties: {
    serverFarmId: plan.id
    httpsOnly: true
    publicNetworkAccess: 'Enabled'
    // Key Vault references (WEBHOOK_SECRET, ALERT_WEBHOOK_URL, AZURE_OPENAI_API_KEY) resolve with the user-assigned identity.
    keyVaultReferenceIdentity: identityId
    siteConfig: {
      minTlsVersion: '1.2'
      http20Enabled: true
      appSettings: concat(applicationSettings, hostSettings)
    }
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: '${storage.properties.primaryEndpoints.blob}${deploymentContainerName}'
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: identityId
          }
        }
      }
      scaleAndConcurrency: {
        maximumInstanceCount: maximumInstanceCount
        instanceMemoryMB: instanceMemoryMB
        alwaysReady: alwaysReady
      }
      runtime: {
        name: 'python'
        version: pythonVersion
      }
    }
  }
}

// App Service Authentication (Easy Auth) with Microsoft Entra ID, for the approval and operations pages.
//
// unauthenticatedClientAction is AllowAnonymous, not RedirectToLoginPage, on purpose: the machine API
// (POST /api/events, signed with the webhook secret; the approval, withdrawal and case endpoints,
// called with function keys) is used by programs that have no Entra ID sign-in, and a platform-wide
// redirect or 401 would lock them out. So the platform signs people in where they ask to, and passes
// who they are in X-MS-CLIENT-PRINCIPAL (removing any such header a client sent); the pages themselves
// refuse a request without a principal (redirecting a browser to /.auth/login/aad) or without the
// app role they need (403): Casekeeper.Approver to answer approvals, Casekeeper.Operator for /api/ops.
// The code trusts that header only while this is on (WEBSITE_AUTH_ENABLED, set by the platform).
//
// No client secret: the platform signs in with the OpenID Connect ID token (the app registration must
// issue ID tokens), whose roles claim carries the app roles assigned to the person.
resource authSettings 'Microsoft.Web/sites/config@2024-04-01' = if (!empty(authClientId)) {
  parent: functionApp
  name: 'authsettingsV2'
  properties: {
    platform: {
      enabled: true
    }
    globalValidation: {
      requireAuthentication: false
      unauthenticatedClientAction: 'AllowAnonymous'
    }
    httpSettings: {
      requireHttps: true
    }
    identityProviders: {
      azureActiveDirectory: {
        enabled: true
        registration: {
          clientId: authClientId
          openIdIssuer: '${environment().authentication.loginEndpoint}${tenant().tenantId}/v2.0'
        }
        validation: {
          allowedAudiences: [
            authClientId
            'api://${authClientId}'
          ]
        }
      }
    }
    login: {
      tokenStore: {
        enabled: true
      }
    }
  }
}

output name string = functionApp.name
output defaultHostName string = functionApp.properties.defaultHostName
